// The 3D scene: one Points object per frame (its int16 block decoded by the object's transform),
// a frustum per camera, the trajectory, and the filters the controls set. World coordinates are
// the first camera's, OpenCV axes (y down), so "up" on screen is -y.
import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';

const UP = new THREE.Vector3(0, -1, 0);

// Confidence and decimation filter on the GPU: a point that fails is moved outside the clip
// volume, so changing a slider only changes two uniforms.
const vertexShader = `
  attribute vec3 rgb;
  attribute float conf;
  uniform float minConf;
  uniform int decimate;
  uniform float size;
  varying vec3 vColor;
  void main() {
    if (conf < minConf || gl_VertexID % decimate != 0) {
      gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
      gl_PointSize = 0.0;
      return;
    }
    vColor = rgb;
    gl_Position = projectionMatrix * modelViewMatrix * vec4(position, 1.0);
    gl_PointSize = size;
  }`;
const fragmentShader = `
  varying vec3 vColor;
  void main() { gl_FragColor = vec4(vColor, 1.0); }`;

function c2wMatrix(c2w) {
  const m = new THREE.Matrix4();
  m.set(c2w[0], c2w[1], c2w[2], c2w[3], c2w[4], c2w[5], c2w[6], c2w[7],
        c2w[8], c2w[9], c2w[10], c2w[11], 0, 0, 0, 1);
  return m;
}

// Unit-depth frustum lines in camera coordinates (scaled by the camera size).
function frustumGeometry(f) {
  const [fx, , cx, , fy, cy] = f.intrinsics;
  const corner = (u, v) => new THREE.Vector3((u - cx) / fx, (v - cy) / fy, 1);
  const c = [corner(0, 0), corner(f.width, 0), corner(f.width, f.height), corner(0, f.height)];
  const o = new THREE.Vector3();
  const pts = [o, c[0], o, c[1], o, c[2], o, c[3], c[0], c[1], c[1], c[2], c[2], c[3], c[3], c[0],
               // a tick on the top edge says which way is up
               c[0].clone().lerp(c[1], 0.4), c[0].clone().lerp(c[1], 0.5).setY(c[0].y * 1.3),
               c[0].clone().lerp(c[1], 0.5).setY(c[0].y * 1.3), c[0].clone().lerp(c[1], 0.6)];
  return new THREE.BufferGeometry().setFromPoints(pts);
}

export class ViewerScene {
  constructor(canvas) {
    this.renderer = new THREE.WebGLRenderer({ canvas, antialias: true, preserveDrawingBuffer: true });
    this.renderer.setPixelRatio(window.devicePixelRatio);
    this.scene = new THREE.Scene();
    this.camera = new THREE.PerspectiveCamera(60, 1, 0.001, 1000);
    this.camera.up.copy(UP);
    this.camera.position.set(0, -0.5, -1.5);
    this.controls = new OrbitControls(this.camera, canvas);
    this.controls.enableDamping = true;
    this.material = new THREE.ShaderMaterial({
      vertexShader, fragmentShader,
      uniforms: { minConf: { value: 0 }, decimate: { value: 1 }, size: { value: 2 } },
    });
    this.clouds = new THREE.Group();
    this.cameras = new THREE.Group();
    this.scene.add(this.clouds, this.cameras);
    this.trajectory = null;
    this.frames = [];         // decoded frames in arrival order
    this.confScale = 40;
    this.threshold = 1.5;     // confidence
    this.decimate = 1;
    this.cameraSize = 0.03;   // of the scene's size
    this.sceneScale = 1;
    this.time = -1;           // last frame shown (-1: none yet)
    this.mode = '3d';
    this.flight = null;
    this.resize();
    window.addEventListener('resize', () => this.resize());
    this.renderer.setAnimationLoop((t) => this.tick(t));
  }

  setBackground(rgb) {
    this.scene.background = new THREE.Color().setRGB(rgb[0] / 255, rgb[1] / 255, rgb[2] / 255,
                                                     THREE.SRGBColorSpace);
  }

  clear() {
    for (const f of this.frames) {
      f.points.geometry.dispose();
      f.frustum.geometry.dispose();
      f.frustum.material.dispose();
    }
    this.clouds.clear();
    this.cameras.clear();
    this.frames = [];
    this.time = -1;
    this.updateTrajectory();
  }

  addFrame(f) {
    const g = new THREE.BufferGeometry();
    g.setAttribute('position', new THREE.BufferAttribute(f.q, 3));
    g.setAttribute('rgb', new THREE.BufferAttribute(f.rgb, 3, true));
    g.setAttribute('conf', new THREE.BufferAttribute(f.conf, 1));
    f.points = new THREE.Points(g, this.material);
    f.points.frustumCulled = false;
    // position = offset + step * (q + 32768), done by the object's transform
    f.points.scale.fromArray(f.step);
    f.points.position.set(f.offset[0] + 32768 * f.step[0], f.offset[1] + 32768 * f.step[1],
                          f.offset[2] + 32768 * f.step[2]);
    f.pose = c2wMatrix(f.c2w);
    f.centre = new THREE.Vector3().setFromMatrixPosition(f.pose);
    f.frustum = new THREE.LineSegments(frustumGeometry(f), new THREE.LineBasicMaterial());
    f.frustum.material.color.setRGB(f.colour[0] / 255, f.colour[1] / 255, f.colour[2] / 255,
                                    THREE.SRGBColorSpace);
    f.frustum.matrixAutoUpdate = false;
    f.frustum.userData.frame = this.frames.length;
    this.frames.push(f);
    this.clouds.add(f.points);
    this.cameras.add(f.frustum);
    this.updateFrustum(f);
    this.updateTrajectory();
  }

  setColours(colours) {
    colours.forEach((c, i) => {
      const f = this.frames[i];
      if (!f) return;
      f.colour = c;
      f.frustum.material.color.setRGB(c[0] / 255, c[1] / 255, c[2] / 255, THREE.SRGBColorSpace);
    });
    this.updateTrajectory();
  }

  // Camera sizes are relative to the scene, whose size is taken once the first frames are in
  // (the model's units are arbitrary).
  setSceneScale() {
    this.sceneScale = Math.max(this.bounds().getSize(new THREE.Vector3()).length(), 1e-3);
    for (const f of this.frames) this.updateFrustum(f);
  }

  updateFrustum(f) {
    const s = this.cameraSize * this.sceneScale;
    f.frustum.matrix.copy(f.pose).multiply(new THREE.Matrix4().makeScale(s, s, s));
    f.frustum.matrixWorldNeedsUpdate = true;
  }

  updateTrajectory() {
    if (this.trajectory) {
      this.scene.remove(this.trajectory);
      this.trajectory.geometry.dispose();
      this.trajectory = null;
    }
    const shown = this.frames.slice(0, this.time + 1);
    if (shown.length < 2) return;
    const g = new THREE.BufferGeometry().setFromPoints(shown.map((f) => f.centre));
    const colours = new THREE.Color();
    const c = new Float32Array(shown.length * 3);
    shown.forEach((f, i) => {
      colours.setRGB(f.colour[0] / 255, f.colour[1] / 255, f.colour[2] / 255, THREE.SRGBColorSpace);
      colours.toArray(c, 3 * i);
    });
    g.setAttribute('color', new THREE.BufferAttribute(c, 3));
    this.trajectory = new THREE.Line(g, new THREE.LineBasicMaterial({ vertexColors: true }));
    this.trajectory.visible = this.showTrajectory !== false;
    this.scene.add(this.trajectory);
  }

  // Which frames are drawn: 3D all up to `time`, 4D only `time`.
  show(time, mode) {
    this.time = Math.min(time, this.frames.length - 1);
    this.mode = mode;
    this.frames.forEach((f, i) => {
      const on = mode === '4d' ? i === this.time : i <= this.time;
      f.points.visible = on;
      f.frustum.visible = on;
    });
    this.updateTrajectory();
  }

  setThreshold(c) {
    this.threshold = c;
    // The same rounding the counts use (pointsShown), so what is drawn is what is counted.
    this.material.uniforms.minConf.value = this.minConfQ();
  }
  minConfQ() { return Math.round(Math.log(Math.max(this.threshold, 1)) * this.confScale); }
  setDecimate(k) { this.decimate = k; this.material.uniforms.decimate.value = k; }
  setPointSize(s) { this.material.uniforms.size.value = s * this.renderer.getPixelRatio(); }
  setCamerasVisible(on) { this.cameras.visible = on; }
  setTrajectoryVisible(on) {
    this.showTrajectory = on;
    if (this.trajectory) this.trajectory.visible = on;
  }
  setCameraSize(s) {
    this.cameraSize = s;
    for (const f of this.frames) this.updateFrustum(f);
  }

  // Indices of the points that pass the filters, per visible frame.
  *filtered() {
    const minQ = this.minConfQ();
    for (const f of this.frames) {
      if (!f.points.visible) continue;
      for (let i = 0; i < f.count; i += this.decimate) if (f.conf[i] >= minQ) yield [f, i];
    }
  }
  pointsShown() {
    const minQ = this.minConfQ();
    let n = 0;
    for (const f of this.frames) {
      if (!f.points.visible) continue;
      const conf = f.conf;
      for (let i = 0; i < f.count; i += this.decimate) if (conf[i] >= minQ) ++n;
    }
    return n;
  }
  pointsReceived() { return this.frames.reduce((n, f) => n + f.count, 0); }

  // The filtered points in world coordinates: Float32 xyz and Uint8 rgb.
  exportPoints() {
    const n = this.pointsShown();
    const xyz = new Float32Array(3 * n), rgb = new Uint8Array(3 * n);
    let k = 0;
    for (const [f, i] of this.filtered()) {
      for (let a = 0; a < 3; ++a) {
        xyz[3 * k + a] = f.offset[a] + f.step[a] * (f.q[3 * i + a] + 32768);
        rgb[3 * k + a] = f.rgb[3 * i + a];
      }
      ++k;
    }
    return { xyz, rgb };
  }

  bounds() {
    const box = new THREE.Box3();
    for (const f of this.frames) {
      if (!f.points.visible || f.count === 0) continue;
      box.expandByPoint(new THREE.Vector3().fromArray(f.offset));
      box.expandByPoint(new THREE.Vector3(f.offset[0] + 65535 * f.step[0],
                                          f.offset[1] + 65535 * f.step[1],
                                          f.offset[2] + 65535 * f.step[2]));
      box.expandByPoint(f.centre);
    }
    if (box.isEmpty()) box.expandByPoint(new THREE.Vector3()).expandByScalar(1);
    return box;
  }

  // Presets and fly-to: an animated move of the orbit camera to (position, target, up).
  view(name) {
    const box = this.bounds();
    const c = box.getCenter(new THREE.Vector3());
    const r = Math.max(box.getSize(new THREE.Vector3()).length() * 0.6, 0.1);
    // The orbit keeps "up" at -y, so the top view sits a hair off the pole.
    if (name === 'top') this.flyTo(c.clone().add(new THREE.Vector3(0, -r * 1.5, -r * 0.01)), c);
    else if (name === 'front') this.flyTo(c.clone().add(new THREE.Vector3(0, 0, -r * 1.5)), c);
    else if (name === 'overview') this.flyTo(c.clone().add(new THREE.Vector3(r, -r, -r)), c);
    else if (name === 'first' && this.frames.length) this.flyToCamera(0);
  }

  flyToCamera(i, animate = true) {
    const f = this.frames[i];
    if (!f) return;
    const e = f.pose.elements;  // column-major: columns 0..2 are the camera axes in the world
    const forward = new THREE.Vector3(e[8], e[9], e[10]).normalize();
    const down = new THREE.Vector3(e[4], e[5], e[6]).normalize();
    const d = Math.max(this.bounds().getSize(new THREE.Vector3()).length() * 0.25, 0.05);
    // Just behind and above the camera, looking where it looks.
    const pos = f.centre.clone().addScaledVector(forward, -0.3 * d).addScaledVector(down, -0.1 * d);
    this.flyTo(pos, f.centre.clone().addScaledVector(forward, d), animate);
  }

  flyTo(position, target, animate = true) {
    const from = { p: this.camera.position.clone(), t: this.controls.target.clone() };
    this.flight = { from, to: { p: position, t: target }, start: performance.now(), ms: animate ? 600 : 0 };
  }

  // The camera (frame index) under a click, or -1.
  pick(clientX, clientY) {
    const r = this.renderer.domElement.getBoundingClientRect();
    const ndc = new THREE.Vector2(((clientX - r.left) / r.width) * 2 - 1, -((clientY - r.top) / r.height) * 2 + 1);
    const ray = new THREE.Raycaster();
    ray.params.Line.threshold = this.cameraSize * this.sceneScale * 0.2;
    ray.setFromCamera(ndc, this.camera);
    const hits = this.cameras.visible ? ray.intersectObjects(this.cameras.children.filter((o) => o.visible)) : [];
    return hits.length ? hits[0].object.userData.frame : -1;
  }

  screenshot() { return this.renderer.domElement.toDataURL('image/png'); }

  // The panel covers the left of the canvas: the view's centre moves to the middle of the rest.
  resize() {
    const c = this.renderer.domElement;
    const w = c.clientWidth, h = Math.max(1, c.clientHeight);
    this.renderer.setSize(w, h, false);
    this.camera.aspect = w / h;
    const panel = document.getElementById('panel');
    const inset = panel && w > 2 * panel.offsetWidth ? panel.offsetWidth + 8 : 0;
    this.camera.setViewOffset(w, h, -inset / 2, 0, w, h);
    this.camera.updateProjectionMatrix();
  }

  tick(now) {
    if (this.flight) {
      const { from, to, start, ms } = this.flight;
      const k = ms ? Math.min(1, (performance.now() - start) / ms) : 1;
      const s = k * k * (3 - 2 * k);
      this.camera.position.lerpVectors(from.p, to.p, s);
      this.controls.target.lerpVectors(from.t, to.t, s);
      this.camera.lookAt(this.controls.target);
      if (k >= 1) this.flight = null;
    }
    this.controls.update();
    this.renderer.render(this.scene, this.camera);
  }
}
