// A node's shell in an xterm.js terminal over the console WebSocket (a pty on the server
// running what `wanlab shell` runs). Keys go up as text frames, output comes down as
// binary frames; a resize is a {"resize": [cols, rows]} text frame.

import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { wsUrl, enc } from './api.js';

export function openConsole(container, exp, node) {
  container.innerHTML = '';
  const term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false,
                              scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();
  const ws = new WebSocket(wsUrl(`/experiments/${enc(exp)}/console/${enc(node)}`));
  ws.binaryType = 'arraybuffer';
  const resize = () => {
    fit.fit();
    if (ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ resize: [term.cols, term.rows] }));
    }
  };
  ws.onopen = () => { resize(); term.focus(); };
  ws.onmessage = (ev) => {
    term.write(typeof ev.data === 'string' ? ev.data : new Uint8Array(ev.data));
  };
  ws.onclose = (ev) => {
    term.write(`\r\n[console closed${ev.reason ? ': ' + ev.reason : ''}]\r\n`);
  };
  term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(d); });
  window.addEventListener('resize', resize);
  const text = () => {
    const b = term.buffer.active;
    const lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i).translateToString(true));
    return lines.join('\n');
  };
  return {
    term, ws, text,
    close() { window.removeEventListener('resize', resize); ws.close(); term.dispose(); },
  };
}
