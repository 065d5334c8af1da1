// The WebSocket to the server: decodes its messages (see docs/ARCHITECTURE.md, "Wire format")
// and hands them to the callbacks. Reconnects after a drop; the server then starts over with a
// hello and the whole cloud.
const FRAME = 1, IMAGE = 2, COLOURS = 3;
const FRAME_HEADER = 136;

function decodeFrame(buf) {
  const u32 = new Uint32Array(buf, 0, 6);
  const f32 = new Float32Array(buf, 24, 27);
  const n = u32[3];
  const colour = new Uint8Array(buf, 132, 3);
  return {
    index: u32[1], keyframe: (u32[2] & 1) !== 0, scaleFrame: (u32[2] & 2) !== 0, count: n,
    width: u32[4], height: u32[5],
    c2w: Array.from(f32.subarray(0, 12)), intrinsics: Array.from(f32.subarray(12, 21)),
    offset: Array.from(f32.subarray(21, 24)), step: Array.from(f32.subarray(24, 27)),
    colour: Array.from(colour),
    q: new Int16Array(buf, FRAME_HEADER, 3 * n),
    rgb: new Uint8Array(buf, FRAME_HEADER + 6 * n, 3 * n),
    conf: new Uint8Array(buf, FRAME_HEADER + 9 * n, n),
  };
}

function decodeImage(buf) {
  const u32 = new Uint32Array(buf, 0, 4);
  return { index: u32[1], width: u32[2], height: u32[3], rgb: new Uint8Array(buf, 16) };
}

function decodeColours(buf) {
  const n = new Uint32Array(buf, 0, 2)[1];
  const c = new Uint8Array(buf, 8, 3 * n);
  return Array.from({ length: n }, (_, i) => [c[3 * i], c[3 * i + 1], c[3 * i + 2]]);
}

export class Connection {
  // on: { hello, frame, image, colours, status, pong, closed }
  constructor(on) {
    this.on = on;
    this.wantImages = true;
    this.open();
  }

  open() {
    // The page's query goes along: `serve --view` picks the stream by ?session=ID (and ?token=).
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const url = `${scheme}://${location.host}/ws${location.search}`;
    this.ws = new WebSocket(url);
    this.ws.binaryType = 'arraybuffer';
    this.ws.onopen = () => { if (!this.wantImages) this.send({ op: 'images', on: false }); };
    this.ws.onmessage = (e) => this.receive(e.data);
    this.ws.onclose = () => {
      this.on.closed?.();
      setTimeout(() => this.open(), 1000);
    };
  }

  receive(data) {
    if (typeof data === 'string') {
      const m = JSON.parse(data);
      this.on[m.type]?.(m);
      return;
    }
    const type = new Uint32Array(data, 0, 1)[0];
    if (type === FRAME) this.on.frame?.(decodeFrame(data));
    else if (type === IMAGE) this.on.image?.(decodeImage(data));
    else if (type === COLOURS) this.on.colours?.(decodeColours(data));
  }

  send(message) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(message));
  }

  // Whether the server should keep sending the current input frame.
  setImages(on) {
    this.wantImages = on;
    this.send({ op: 'images', on });
  }
}
