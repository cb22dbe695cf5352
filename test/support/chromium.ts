// A real browser for tests without a browser library: Debian's Chromium, headless, driven over the
// DevTools protocol on a pipe (--remote-debugging-pipe: NUL-separated JSON on file descriptors 3
// and 4), so no WebSocket client and no browser download are needed. One page; every wait bounded.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';

export const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => fs.existsSync(p));

interface Pending { resolve(v: any): void; reject(e: Error): void }

export class Browser {
  private id = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners: Array<(method: string, params: any, sessionId?: string) => void> = [];
  private buffer = '';
  private session = '';
  /** Every console message and log entry the page produced (a CSP refusal lands here). */
  readonly log: string[] = [];

  private constructor(private readonly child: ChildProcess, private readonly dir: string) {
    // Gone (closed, crashed): every call still waiting is answered now, its timer cleared.
    child.once('exit', () => {
      for (const p of this.pending.values()) p.reject(new Error('Chromium exited'));
      this.pending.clear();
    });
    const out = child.stdio[4] as Readable;
    out.setEncoding('utf8');
    out.on('data', (chunk: string) => {
      this.buffer += chunk;
      let at: number;
      while ((at = this.buffer.indexOf('\0')) >= 0) {
        const msg = JSON.parse(this.buffer.slice(0, at));
        this.buffer = this.buffer.slice(at + 1);
        if (msg.id !== undefined) {
          const p = this.pending.get(msg.id);
          this.pending.delete(msg.id);
          if (msg.error) p?.reject(new Error(`${msg.error.message}`));
          else p?.resolve(msg.result);
        } else {
          for (const l of [...this.listeners]) l(msg.method, msg.params, msg.sessionId);
        }
      }
    });
  }

  static async launch(): Promise<Browser> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-chromium-'));
    const child = spawn(CHROMIUM!, [
      '--headless=new', '--remote-debugging-pipe', '--no-sandbox', '--disable-gpu', '--no-first-run', '--no-default-browser-check',
      '--disable-extensions', '--disable-background-networking', '--disable-dev-shm-usage', `--user-data-dir=${dir}`, 'about:blank',
    ], { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] });
    const browser = new Browser(child, dir);
    const { targetId } = await browser.send('Target.createTarget', { url: 'about:blank' }, false);
    browser.session = (await browser.send('Target.attachToTarget', { targetId, flatten: true }, false)).sessionId;
    browser.listeners.push((method, params) => {
      if (method === 'Runtime.consoleAPICalled') browser.log.push(params.args.map((a: any) => a.value ?? a.description).join(' '));
      if (method === 'Log.entryAdded') browser.log.push(`${params.entry.level}: ${params.entry.text}`);
    });
    await browser.send('Page.enable');
    await browser.send('Runtime.enable');
    await browser.send('Log.enable');
    await browser.send('Emulation.setDeviceMetricsOverride', { width: 1200, height: 760, deviceScaleFactor: 1, mobile: false });
    return browser;
  }

  send(method: string, params: Record<string, unknown> = {}, onPage = true, timeoutMs = 15_000): Promise<any> {
    const id = ++this.id;
    const message = { id, method, params, ...(onPage ? { sessionId: this.session } : {}) };
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer in ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: (v) => { clearTimeout(timer); resolve(v); }, reject: (e) => { clearTimeout(timer); reject(e); } });
      (this.child.stdio[3] as Writable).write(`${JSON.stringify(message)}\0`);
    });
  }

  /** Resolves on the page's next load event (bounded). */
  private loaded(timeoutMs = 15_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no page load in ${timeoutMs} ms`)), timeoutMs);
      const listener = (method: string, _p: unknown, sessionId?: string) => {
        if (method !== 'Page.loadEventFired' || sessionId !== this.session) return;
        clearTimeout(timer);
        this.listeners.splice(this.listeners.indexOf(listener), 1);
        resolve();
      };
      this.listeners.push(listener);
    });
  }

  async goto(url: string): Promise<void> {
    const load = this.loaded();
    await this.send('Page.navigate', { url });
    await load;
  }

  /** The value of an expression in the page. */
  async eval<T = any>(expression: string): Promise<T> {
    const r = await this.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(`in the page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
    return r.result.value as T;
  }

  /** Clicks what the selector finds (a link or a submit button) with a real mouse event, and waits for the page it leads to. */
  async click(selector: string): Promise<void> {
    const box = await this.eval<{ x: number; y: number } | null>(`(() => { const e = document.querySelector(${JSON.stringify(selector)}); if (!e) return null;
      e.scrollIntoView({ block: 'center' }); const r = e.getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
    if (box === null) throw new Error(`nothing on ${await this.eval('location.pathname')} matches ${selector}`);
    const load = this.loaded();
    for (const type of ['mousePressed', 'mouseReleased']) {
      await this.send('Input.dispatchMouseEvent', { type, x: box.x, y: box.y, button: 'left', clickCount: 1 });
    }
    await load;
  }

  async type(selector: string, text: string): Promise<void> {
    await this.eval(`document.querySelector(${JSON.stringify(selector)}).focus()`);
    await this.send('Input.insertText', { text });
  }

  async screenshot(file: string): Promise<void> {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: false });
    fs.writeFileSync(file, Buffer.from(data, 'base64'));
  }

  async close(): Promise<void> {
    const exited = new Promise<void>((resolve) => {
      if (this.child.exitCode !== null) return resolve();
      this.child.once('exit', () => resolve());
    });
    try {
      await this.send('Browser.close', {}, false, 5_000);
    } catch {
      this.child.kill('SIGKILL');
    }
    let bound: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => { bound = setTimeout(r, 5_000); })]);
    clearTimeout(bound);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
    for (const stream of this.child.stdio) stream?.destroy();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
