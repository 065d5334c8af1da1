// The viewer in real headless Chromium (puppeteer-core driving Debian's chromium).
//
//   node test/browser.mjs view CLI RESULT_DIR EXPECTED_POINTS [SCREENSHOT.png]
//     `view` on a finished run: the page loads without console errors, the point count shown
//     matches the points sent (EXPECTED_POINTS: the PLY export's count at the same stride and
//     threshold), the picture is not blank, the sliders change what is drawn, and malformed or
//     oversized WebSocket messages close that connection only.
//   node test/browser.mjs live CLI FRAMES_DIR OUT_DIR
//     `run --view`: points arrive while frames are still streaming.
//
// Exits 77 (CTest's skip code here) when chromium is missing.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const SKIP = 77;
const chromium = process.env.CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser']
  .find((p) => existsSync(p));
if (!chromium) {
  console.log('skipped: no chromium (apt-get install chromium)');
  process.exit(SKIP);
}

function check(ok, what) {
  if (!ok) throw new Error(`FAILED: ${what}`);
  console.log(`ok: ${what}`);
}

// Starts the CLI and resolves with its viewer URL (from "viewer: http://..." on stderr).
function startCli(cli, args) {
  const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.output = '';
  const collect = (d) => { child.output += d; };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const url = new Promise((resolve, reject) => {
    child.stderr.on('data', () => {
      const m = child.output.match(/viewer: (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`${cli} exited (${code}): ${child.output}`)));
  });
  return { child, url };
}

async function stopCli(child) {
  const done = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGINT');
  return done;
}

async function openPage(browser, url) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 720 });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: 'load' });
  return { page, errors };
}

const text = (page, id) => page.$eval(`#${id}`, (e) => e.textContent);
const number = async (page, id) => Number(await text(page, id));

// Pixels of the 3D view that are not the background (the canvas keeps its drawing buffer).
async function drawnPixels(page) {
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return page.evaluate(() => {
    const src = document.getElementById('view');
    const c = document.createElement('canvas');
    c.width = src.width;
    c.height = src.height;
    const g = c.getContext('2d');
    g.drawImage(src, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4)
      if (Math.abs(d[i] - 16) + Math.abs(d[i + 1] - 18) + Math.abs(d[i + 2] - 24) > 12) ++n;
    return n;
  });
}

async function setSlider(page, id, value) {
  await page.$eval(`#${id}`, (e, v) => {
    e.value = v;
    e.dispatchEvent(new Event('input'));
  }, String(value));
}

// Sends `message` on a fresh WebSocket and resolves with the close code the server gives.
function closeCodeFor(page, message) {
  return page.evaluate((m) => new Promise((resolve) => {
    const ws = new WebSocket(`ws://${location.host}/ws`);
    ws.onopen = () => ws.send(m);
    ws.onclose = (e) => resolve(e.code);
    setTimeout(() => resolve(-1), 5000);
  }), message);
}

async function testView(browser, cli, dir, expected, shot) {
  const { child, url } = startCli(cli, ['view', dir, '--port', '0', '--point-stride', '2',
                                        '--conf-threshold', '1.5']);
  try {
    const { page, errors } = await openPage(browser, await url);
    await page.waitForFunction(() => {
      const s = document.getElementById('status').dataset;
      return s.finished === '1' &&
        document.getElementById('points-received').textContent === s.points;
    }, { timeout: 20000 });
    const received = await number(page, 'points-received');
    check(received === expected, `points received ${received} = points exported ${expected}`);
    check(await page.$eval('#status', (e) => e.dataset.points) === String(expected),
          'the server reports the same count');
    // At the lowest threshold every point received is drawn.
    await setSlider(page, 'conf', 1);
    check(await number(page, 'points-shown') === received, 'lowest threshold shows every point');
    const all = await drawnPixels(page);
    check(all > 500, `the picture is not blank (${all} pixels drawn)`);
    await setSlider(page, 'decimate', 8);
    const fewer = await number(page, 'points-shown');
    check(fewer > 0 && fewer <= Math.ceil(received / 8) + 16, `every 8th point: ${fewer} shown`);
    const decimated = await drawnPixels(page);
    check(decimated < all, `decimation draws less (${decimated} < ${all} pixels)`);
    await setSlider(page, 'decimate', 1);
    await setSlider(page, 'conf', 10);
    const strict = await number(page, 'points-shown');
    check(strict < received, `a high threshold shows fewer points (${strict} < ${received})`);
    await setSlider(page, 'conf', 1);
    // The timeline: at frame 0 in 3D only frame 0 is drawn; 4D at the last frame only that one.
    const counts = await page.evaluate(() => window.lingbotViewer.scene.frames.map((f) => f.count));
    await setSlider(page, 'time', 0);
    check(await number(page, 'points-shown') === counts[0], `timeline at 0: ${counts[0]} points`);
    await setSlider(page, 'time', counts.length - 1);
    await page.click('input[name=mode][value="4d"]');
    check(await number(page, 'points-shown') === counts.at(-1),
          `4D at the last frame: ${counts.at(-1)} points`);
    await page.click('input[name=mode][value="3d"]');
    const exported = await page.evaluate(() => window.lingbotViewer.scene.exportPoints().xyz.length / 3);
    check(exported === received, `the export holds the points shown (${exported})`);
    // Every other control once, for console errors.
    for (const v of ['top', 'front', 'first', 'overview']) await page.click(`[data-view=${v}]`);
    await page.click('#play');
    await new Promise((r) => setTimeout(r, 300));
    await page.click('#play');
    await page.click('#follow');
    await page.click('#follow');
    await page.click('#cameras');
    await page.click('#cameras');
    await page.click('#images');
    await page.click('#images');
    await setSlider(page, 'camera-size', 0.1);
    await setSlider(page, 'point-size', 3);
    for (const b of ['export-ply', 'export-glb', 'screenshot']) await page.click(`#${b}`);
    await setSlider(page, 'time', counts.length - 1);
    await setSlider(page, 'conf', 1.5);
    await setSlider(page, 'point-size', 2);
    await setSlider(page, 'camera-size', 0.03);
    await page.click('[data-view=overview]');
    await new Promise((r) => setTimeout(r, 800));
    if (shot) {
      await page.screenshot({ path: shot });
      console.log(`wrote ${shot}`);
    }
    // Bad input on the socket closes that connection and no more: 1008 (policy) for a malformed
    // message; for one over the limit the server sends 1009 (too big) and closes without reading
    // the rest, which the browser may see as 1006 (closed without a close frame).
    check(await closeCodeFor(page, 'not json') === 1008, 'a malformed message closes with 1008');
    const big = await closeCodeFor(page, '{"op":"ping","id":' + ' '.repeat(8000) + '1}');
    check(big === 1009 || big === 1006, `an oversized message closes the connection (${big})`);

    const again = await fetch(await url);
    check(again.status === 200, 'the server still answers afterwards');
    check((await fetch(new URL('/../etc/passwd', await url))).status === 404, 'unknown paths are 404');
    check(errors.length === 0, `no console errors${errors.length ? ': ' + errors.join('; ') : ''}`);
  } finally {
    const code = await stopCli(child);
    check(code === 0, `view exits cleanly on Ctrl-C (${code})`);
  }
}

async function testLive(browser, cli, frames, out) {
  const { child, url } = startCli(cli, [
    'run', '--model', 'synthetic:1', '--arch', 'tiny', '--input', frames, '--preprocess', 'none',
    '--scale-frames', '4', '--window', '6', '--threads', '1', '--out', out, '--quiet', '--view',
    '--port', '0']);
  try {
    const { page, errors } = await openPage(browser, await url);
    // The first points, then: is the run still going?
    await page.waitForFunction(() => Number(document.getElementById('points-received').textContent) > 0,
                               { timeout: 60000, polling: 20 });
    const frames0 = await number(page, 'frames');
    const finished0 = await page.$eval('#status', (e) => e.dataset.finished);
    const summary = /frames in/.test(child.output);
    check(!summary && finished0 !== '1',
          `points arrived while the run was streaming (${frames0} frames in)`);
    await page.waitForFunction(() => document.getElementById('status').dataset.finished === '1',
                               { timeout: 120000 });
    const last = await number(page, 'frames');
    check(last > frames0, `more frames arrived afterwards (${last} in all)`);
    check(errors.length === 0, `no console errors${errors.length ? ': ' + errors.join('; ') : ''}`);
  } finally {
    const code = await stopCli(child);
    check(code === 0, `run --view exits cleanly on Ctrl-C (${code})`);
  }
}

const [mode, cli, ...rest] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--use-gl=swiftshader', '--enable-unsafe-swiftshader',
         '--ignore-gpu-blocklist', '--window-size=1100,720'],
});
let failed = false;
try {
  if (mode === 'view') await testView(browser, cli, rest[0], Number(rest[1]), rest[2]);
  else if (mode === 'live') await testLive(browser, cli, rest[0], rest[1]);
  else throw new Error(`unknown mode ${mode}`);
} catch (e) {
  console.error(String(e.stack || e));
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
