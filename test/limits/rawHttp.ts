// A raw HTTP/1.1 exchange on a socket of its own: the test decides what of the body is sent and when,
// and sees what the server answered and whether it closed the connection.
import net from 'node:net';

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: any;
}

export interface RawExchange {
  socket: net.Socket;
  /** The first answer on the socket, parsed; rejects if the socket closes before one arrives. */
  answer: Promise<RawAnswer>;
  /** Resolves when the server ended or closed the connection. */
  closed: Promise<void>;
  /** Writes and waits until the socket took it; false once the socket cannot be written (the server closed it). */
  send(data: string | Buffer): Promise<boolean>;
}

export function rawRequest(port: number, head: string): RawExchange {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  let received = Buffer.alloc(0);
  let resolveAnswer!: (a: RawAnswer) => void;
  let rejectAnswer!: (e: Error) => void;
  const answer = new Promise<RawAnswer>((resolve, reject) => {
    resolveAnswer = resolve;
    rejectAnswer = reject;
  });
  const closed = new Promise<void>((resolve) => {
    socket.once('end', resolve);
    socket.once('close', () => {
      resolve();
      rejectAnswer(new Error(`the connection closed with no complete answer: ${JSON.stringify(received.toString().slice(0, 200))}`));
    });
  });
  socket.on('data', (d: Buffer) => {
    received = Buffer.concat([received, d]);
    const text = received.toString('latin1');
    const end = text.indexOf('\r\n\r\n');
    if (end < 0) return;
    const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
    const headers: Record<string, string> = {};
    for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const length = Number(headers['content-length'] ?? 0);
    const body = received.subarray(end + 4);
    if (body.length < length) return;
    const bodyText = body.subarray(0, length).toString('utf8');
    resolveAnswer({ status: Number(statusLine.split(' ')[1]), headers, body: bodyText ? JSON.parse(bodyText) : undefined });
  });
  socket.write(head);
  const send = (data: string | Buffer) =>
    new Promise<boolean>((resolve) => {
      if (socket.destroyed || !socket.writable) return resolve(false);
      socket.write(data, (err) => resolve(!err));
    });
  return { socket, answer, closed, send };
}

export function head(method: string, path: string, headers: Record<string, string | number>): string {
  return `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
}
