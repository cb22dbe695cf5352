// The curl commands of a page's first bash block after a heading, parsed, so the suites that run
// the docs' examples (the README tour, the timer flow) read them one way.
import fs from 'node:fs';
import path from 'node:path';

export interface Curl {
  method: string;
  /** The path and query, without the host. */
  path: string;
  body?: string;
}

const REPO = path.resolve(__dirname, '..', '..', '..');

/** `file` relative to the repository; continuation lines (a trailing backslash, a multi-line -d) are joined. */
export function curlsIn(file: string, heading: string): Curl[] {
  const text = fs.readFileSync(path.join(REPO, file), 'utf8');
  const section = text.slice(text.indexOf(heading));
  const start = section.indexOf('```bash') + 7;
  const block = section.slice(start, section.indexOf('```', start));
  const commands: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('curl ')) commands.push(line);
    else if (commands.length > 0 && !line.startsWith('#') && line.trim() !== '') commands[commands.length - 1] += `\n${line}`;
  }
  return commands.map((c) => {
    const command = c.replace(/\\\n/g, ' ');
    const url = /'?((?:http:\/\/)?localhost:6632[^'\s]*)'?/.exec(command)![1];
    return {
      method: /-X (\w+)/.exec(command)?.[1] ?? 'GET',
      path: url.replace(/^(?:http:\/\/)?localhost:6632/, ''),
      body: /-d '([^']*)'/s.exec(command)?.[1],
    };
  });
}
