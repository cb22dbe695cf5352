// The console's one stylesheet, served at /console/console.css (the CSP allows styles from the
// cell only, never inline). The console has no script.
export const CSS = `
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
header{background:#20262e;color:#fff;padding:.5rem 1rem;display:flex;align-items:center;gap:1.5rem;flex-wrap:wrap}
header h1{font-size:1.05rem;margin:0}
nav{display:flex;gap:1rem;align-items:center;flex-wrap:wrap}
nav a{color:#cfe3ff}
nav .tenant{color:#ffd88a;font-family:monospace}
nav .who{color:#cfe3ff}
main{padding:1rem 1.5rem;max-width:1200px}
h2{margin-top:0}
h3{margin:1.2rem 0 .4rem}
table{border-collapse:collapse;background:#fff;width:100%;margin:.3rem 0}
th,td{border:1px solid #d7dbe0;padding:.25rem .5rem;text-align:left;vertical-align:top}
thead th{background:#eceff3}
tr.stuck td{background:#fff1e6}
.flag{color:#b3261e}
.on{color:#17663a;font-weight:600}.off{color:#b3261e;font-weight:600}
.none{color:#7a828c}
.id,code{font-family:monospace;font-size:.92em}
pre.payload{background:#fff;border:1px solid #d7dbe0;padding:.6rem;overflow:auto;max-height:32rem;white-space:pre-wrap;word-break:break-all}
form.inline{display:inline}
button{font:inherit;padding:.15rem .6rem;border:1px solid #8a939e;border-radius:3px;background:#fff;cursor:pointer}
button.danger{border-color:#b3261e;color:#b3261e}
header button{background:transparent;color:#fff;border-color:#cfe3ff}
.notice{background:#e6f4ea;border:1px solid #9bd0ac;padding:.4rem .6rem}
.error{background:#fdecea;border:1px solid #f0a8a0;padding:.4rem .6rem}
form.login{display:flex;flex-direction:column;gap:.5rem;max-width:22rem}
form.login input,form.picker input{font:inherit;padding:.25rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}dd{margin:0}
.hint{color:#59616b;font-size:.9em}
.cell{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 1.5rem}
.cell section{min-width:0}
`;
