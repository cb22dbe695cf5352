// What the client's type-checking suites share (packed.test.ts, readmeTypes.test.ts): a program
// over user code, strict, with the options a user's Node project has, and its problems as text.
import ts from 'typescript';

export function strictProgram(files: string[], options: ts.CompilerOptions): { program: ts.Program; problems: string[] } {
  const program = ts.createProgram(files, {
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10,
    lib: ['lib.es2022.d.ts'],
    types: ['node'],
    skipLibCheck: true,
    ...options,
  });
  const problems = ts
    .getPreEmitDiagnostics(program)
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n') + (d.file && d.start !== undefined ? ` (line ${d.file.getLineAndCharacterOfPosition(d.start).line + 1})` : ''));
  return { program, problems };
}
