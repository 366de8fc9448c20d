// Bundle the portal's pages into ../wanlab/portal/static (served by `wanlab serve`).
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';

const out = '../wanlab/portal/static';
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ['src/main.js'],
  bundle: true,
  minify: true,
  sourcemap: false,
  target: ['es2020'],
  outfile: `${out}/app.js`,
  logLevel: 'warning',
});
copyFileSync('src/index.html', `${out}/index.html`);
