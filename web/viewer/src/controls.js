// The side panel: sliders and buttons bound to the scene, the timeline, counts and the input
// frame, and the exports (screenshot, GLB, PLY of the points that pass the filters).
import * as THREE from 'three';
import { GLTFExporter } from 'three/addons/exporters/GLTFExporter.js';

const $ = (id) => document.getElementById(id);

function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

// Binary little-endian PLY, as `lingbot-map run --export ply` writes (without confidence).
function plyBlob({ xyz, rgb }) {
  const n = xyz.length / 3;
  const header = `ply\nformat binary_little_endian 1.0\nelement vertex ${n}\n` +
    'property float x\nproperty float y\nproperty float z\n' +
    'property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n';
  const body = new DataView(new ArrayBuffer(15 * n));
  for (let i = 0; i < n; ++i) {
    for (let a = 0; a < 3; ++a) body.setFloat32(15 * i + 4 * a, xyz[3 * i + a], true);
    for (let a = 0; a < 3; ++a) body.setUint8(15 * i + 12 + a, rgb[3 * i + a]);
  }
  return new Blob([header, body.buffer], { type: 'application/octet-stream' });
}

async function glbBlob({ xyz, rgb }) {
  const g = new THREE.BufferGeometry();
  g.setAttribute('position', new THREE.BufferAttribute(xyz, 3));
  g.setAttribute('color', new THREE.BufferAttribute(rgb, 3, true));
  const points = new THREE.Points(g, new THREE.PointsMaterial({ vertexColors: true }));
  const glb = await new GLTFExporter().parseAsync(points, { binary: true });
  return new Blob([glb], { type: 'model/gltf-binary' });
}

export class Controls {
  constructor(scene, connection) {
    this.scene = scene;
    this.connection = connection;
    this.playing = false;
    this.atEnd = true;  // the timeline follows new frames while it sits on the last one
    this.status = {};
    this.bind();
  }

  bind() {
    const s = this.scene;
    const range = (id, out, f) => {
      const apply = () => { f(Number($(id).value)); if (out) $(out).textContent = $(id).value; this.counts(); };
      $(id).addEventListener('input', apply);
      apply();
    };
    range('conf', 'conf-out', (v) => s.setThreshold(v));
    range('point-size', 'size-out', (v) => s.setPointSize(v));
    range('decimate', 'decimate-out', (v) => s.setDecimate(v));
    range('camera-size', null, (v) => s.setCameraSize(v));
    $('cameras').addEventListener('change', (e) => s.setCamerasVisible(e.target.checked));
    $('trajectory').addEventListener('change', (e) => s.setTrajectoryVisible(e.target.checked));
    // Hiding the input frame also tells the server to stop sending it.
    $('images').addEventListener('change', (e) => {
      $('frame-box').hidden = !e.target.checked;
      this.connection.setImages(e.target.checked);
    });
    for (const r of document.querySelectorAll('input[name=mode]'))
      r.addEventListener('change', () => this.showTime());
    $('time').addEventListener('input', () => {
      this.atEnd = Number($('time').value) === s.frames.length - 1;
      this.showTime();
    });
    $('play').addEventListener('click', () => this.togglePlay());
    for (const b of document.querySelectorAll('[data-view]'))
      b.addEventListener('click', () => { $('follow').checked = false; s.view(b.dataset.view); });
    $('screenshot').addEventListener('click', async () =>
      download('lingbot-map.png', await (await fetch(s.screenshot())).blob()));
    $('export-ply').addEventListener('click', () => download('points.ply', plyBlob(s.exportPoints())));
    $('export-glb').addEventListener('click', async () =>
      download('points.glb', await glbBlob(s.exportPoints())));
    // A click (not the end of a drag) on a camera flies to it.
    const canvas = s.renderer.domElement;
    let down = null;
    canvas.addEventListener('pointerdown', (e) => { down = [e.clientX, e.clientY]; });
    canvas.addEventListener('pointerup', (e) => {
      if (!down || Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4) return;
      const i = s.pick(e.clientX, e.clientY);
      if (i >= 0) { $('follow').checked = false; s.flyToCamera(i); }
    });
  }

  mode() { return document.querySelector('input[name=mode]:checked').value; }

  showTime() {
    const t = Number($('time').value);
    this.scene.show(t, this.mode());
    $('time-out').textContent = String(t);
    if ($('follow').checked) this.scene.flyToCamera(t, false);
    this.counts();
  }

  togglePlay() {
    this.playing = !this.playing;
    $('play').textContent = this.playing ? '❚❚' : '▶';
    if (!this.playing) return;
    if (Number($('time').value) >= this.scene.frames.length - 1) $('time').value = 0;
    let last = performance.now(), carry = 0;
    const step = (now) => {
      if (!this.playing) return;
      carry += ((now - last) / 1000) * Number($('speed').value);
      last = now;
      const t = Number($('time').value);
      if (carry >= 1) {
        const next = Math.min(t + Math.floor(carry), this.scene.frames.length - 1);
        carry -= Math.floor(carry);
        $('time').value = next;
        this.atEnd = next === this.scene.frames.length - 1;
        this.showTime();
        if (this.atEnd && this.status.finished) return this.togglePlay();
      }
      requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  }

  // Server messages.
  hello(m) {
    this.scene.confScale = m.conf_scale;
    this.scene.setBackground(m.background);
    this.scene.clear();
    $('conf').min = m.min_confidence;
    $('conf').value = m.threshold;
    $('conf').dispatchEvent(new Event('input'));
    this.atEnd = true;
    this.firstView = true;
    this.source = m.source;
  }

  frame(f) {
    this.scene.addFrame(f);
    this.refreshSoon();
  }

  // Frames arrive in bursts (a browser catching up gets the whole cloud): the timeline, counts
  // and first view are brought up to date once per animation frame.
  refreshSoon() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      const last = this.scene.frames.length - 1;
      $('time').max = Math.max(0, last);
      if (this.atEnd && !this.playing) $('time').value = last;
      this.showTime();
      if (this.firstView && this.scene.frames.length >= Math.min(4, this.status.expected || 4)) {
        this.firstView = false;
        this.scene.setSceneScale();
        this.scene.view('overview');
      }
    });
  }

  colours(c) { this.scene.setColours(c); }

  status_(m) {
    this.status = m;
    const state = m.finished ? 'finished' : 'running';
    const thinned = m.thinned > 1 ? ` (1 in ${m.thinned} points kept, for memory)` : '';
    $('status').textContent = `${this.source === 'live' ? 'live run' : this.source}: ${state}${thinned}`;
    $('status').dataset.finished = m.finished ? '1' : '0';
    $('status').dataset.frames = m.frames;
    $('status').dataset.points = m.points;
    this.refreshSoon();
  }

  image(img) {
    const c = $('frame');
    c.width = img.width;
    c.height = img.height;
    const data = new ImageData(img.width, img.height);
    for (let i = 0, n = img.width * img.height; i < n; ++i) {
      data.data[4 * i] = img.rgb[3 * i];
      data.data[4 * i + 1] = img.rgb[3 * i + 1];
      data.data[4 * i + 2] = img.rgb[3 * i + 2];
      data.data[4 * i + 3] = 255;
    }
    c.getContext('2d').putImageData(data, 0, 0);
    $('frame-caption').textContent = `input frame ${img.index}`;
  }

  closed() { $('status').textContent = 'disconnected: reconnecting…'; }

  counts() {
    $('points-shown').textContent = this.scene.pointsShown();
    $('points-received').textContent = this.scene.pointsReceived();
    $('frames').textContent = this.scene.frames.length;
  }
}
