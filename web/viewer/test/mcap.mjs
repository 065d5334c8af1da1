// A run's MCAP export read by the libraries Foxglove and the MCAP tools use, with nothing of ours:
// @mcap/core's indexed reader (summary, chunk index, CRCs), every message decoded by
// @foxglove/rosmsg2-serialization with the ros2msg schema in the file (parsed by @foxglove/rosmsg),
// each field checked against the run's predictions.safetensors and points.ply; then the file cut
// in the middle of its last chunk, read by @mcap/core's stream reader up to the chunk before.
//
//   node test/mcap.mjs RESULT_DIR FRAME_RATE
//     RESULT_DIR holds result.mcap, predictions.safetensors and points.ply (the same point
//     options, every frame a keyframe).
import { readFileSync } from 'node:fs';
import zlib from 'node:zlib';
import { McapIndexedReader, McapStreamReader } from '@mcap/core';
import { parse } from '@foxglove/rosmsg';
import { MessageReader } from '@foxglove/rosmsg2-serialization';
import zstd from '@foxglove/wasm-zstd';

const [dir, rateArg] = process.argv.slice(2);
const rate = Number(rateArg);
let checks = 0;
function check(ok, what) {
  if (!ok) throw new Error(`FAILED: ${what}`);
  ++checks;
}
function close(a, b, tol, what) {
  check(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b}`);
}

// predictions.safetensors: an 8-byte header length, a JSON header, the tensors.
function readSafetensors(path) {
  const buf = readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [b, e] = t.data_offsets;
    const bytes = buf.subarray(8 + n + b, 8 + n + e);
    const copy = new Uint8Array(bytes);  // aligned
    out[name] = { shape: t.shape, data: t.dtype === 'F32' ? new Float32Array(copy.buffer) : copy };
  }
  return out;
}

// points.ply: binary little-endian x y z (f32), r g b (u8), confidence (f32).
function readPly(path) {
  const buf = readFileSync(path);
  const end = buf.indexOf('end_header\n') + 'end_header\n'.length;
  const count = Number(/element vertex (\d+)/.exec(buf.subarray(0, end).toString())[1]);
  const pts = [];
  for (let i = 0; i < count; ++i) {
    const o = end + i * 19;
    pts.push({ x: buf.readFloatLE(o), y: buf.readFloatLE(o + 4), z: buf.readFloatLE(o + 8),
               rgb: [buf[o + 12], buf[o + 13], buf[o + 14]], conf: buf.readFloatLE(o + 15) });
  }
  return pts;
}

const pred = readSafetensors(`${dir}/predictions.safetensors`);
const ply = readPly(`${dir}/points.ply`);
const file = readFileSync(`${dir}/result.mcap`);
const [S, H, W] = pred.depth.shape;
await zstd.isLoaded;
const decompressHandlers = { zstd: (data, size) => zstd.decompress(data, Number(size)) };

const reader = await McapIndexedReader.Initialize({
  readable: {
    size: async () => BigInt(file.length),
    read: async (offset, size) => file.subarray(Number(offset), Number(offset + size)),
  },
  decompressHandlers,
});
check(reader.header.profile === 'ros2', 'profile ros2');
if (zlib.crc32) {
  check(reader.dataSectionCrc === zlib.crc32(file.subarray(0, Number(reader.dataEndOffset))),
        'data section CRC');
}
const topics = new Map();
for (const ch of reader.channelsById.values()) {
  const schema = reader.schemasById.get(ch.schemaId);
  check(ch.messageEncoding === 'cdr' && schema.encoding === 'ros2msg', `${ch.topic}: cdr, ros2msg`);
  const defs = parse(new TextDecoder().decode(schema.data), { ros2: true });
  topics.set(ch.id, { topic: ch.topic, type: schema.name, reader: new MessageReader(defs), msgs: [] });
}
const byTopic = (t) => [...topics.values()].find((x) => x.topic === t);
const expectedTypes = {
  '/tf': 'tf2_msgs/msg/TFMessage', '/lingbot/odometry': 'nav_msgs/msg/Odometry',
  '/lingbot/path': 'nav_msgs/msg/Path', '/lingbot/camera_info': 'sensor_msgs/msg/CameraInfo',
  '/lingbot/depth': 'sensor_msgs/msg/Image', '/lingbot/confidence': 'sensor_msgs/msg/Image',
  '/lingbot/image': 'sensor_msgs/msg/CompressedImage',
  '/lingbot/points': 'sensor_msgs/msg/PointCloud2',
};
for (const [t, type] of Object.entries(expectedTypes))
  check(byTopic(t)?.type === type, `${t} is ${type}`);
check(reader.chunkIndexes.length >= 2, `several chunks (${reader.chunkIndexes.length})`);

let total = 0;
for await (const m of reader.readMessages()) {
  const t = topics.get(m.channelId);
  const msg = t.reader.readMessage(m.data);
  check(!t.reader.lastReadHadTrailingBytes(), `${t.topic}: the schema covers every byte`);
  t.msgs.push({ logTime: m.logTime, msg });
  ++total;
}
check(BigInt(total) === reader.statistics.messageCount, 'statistics: message count');

// map = the model's world with x forward, y left, z up: p_map = A p_world.
const A = [[0, 0, 1], [-1, 0, 0], [0, -1, 0]];
const c2w = (i) => [0, 1, 2].map((r) => [0, 1, 2, 3].map((c) => pred.c2w.data[i * 12 + r * 4 + c]));
function quatToMatrix({ x, y, z, w }) {
  return [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
          [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
          [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]];
}
const mul = (P, Q) => P.map((row) => Q[0].map((_, j) => row.reduce((s, v, k) => s + v * Q[k][j], 0)));
const T = (P) => P[0].map((_, j) => P.map((row) => row[j]));
function checkPose(pos, q, i, what) {
  const M = c2w(i);
  const R = mul(mul(A, M.map((r) => r.slice(0, 3))), T(A));
  const t = A.map((row) => row.reduce((s, v, k) => s + v * M[k][3], 0));
  const got = quatToMatrix(q);
  for (let r = 0; r < 3; ++r) {
    close(pos[['x', 'y', 'z'][r]], t[r], 1e-6, `${what} frame ${i} position`);
    for (let c = 0; c < 3; ++c) close(got[r][c], R[r][c], 2e-6, `${what} frame ${i} rotation`);
  }
}
const stampOf = (i) => BigInt(Math.round((i / rate) * 1e9));
const stampNs = (s) => BigInt(s.sec) * 1000000000n + BigInt(s.nanosec);

const odom = byTopic('/lingbot/odometry').msgs;
check(odom.length === S, `one odometry message a frame (${odom.length} of ${S})`);
odom.forEach(({ logTime, msg }, i) => {
  check(logTime === stampOf(i) && stampNs(msg.header.stamp) === logTime, `frame ${i} stamp`);
  check(msg.header.frame_id === 'map' && msg.child_frame_id === 'lingbot_camera', 'odometry frames');
  checkPose(msg.pose.pose.position, msg.pose.pose.orientation, i, 'odometry');
});

const tf = byTopic('/tf').msgs;
check(tf.length === S, 'one /tf message a frame');
tf.forEach(({ msg }, i) => {
  const [cam, opt] = msg.transforms;
  check(cam.header.frame_id === 'map' && cam.child_frame_id === 'lingbot_camera', 'tf map -> camera');
  check(opt.header.frame_id === 'lingbot_camera' && opt.child_frame_id === 'lingbot_camera_optical',
        'tf camera -> optical');
  checkPose(cam.transform.translation, cam.transform.rotation, i, 'tf');
  // The chain map -> camera -> optical is the model's c2w seen from map: A c2w.
  const chain = mul(quatToMatrix(cam.transform.rotation), quatToMatrix(opt.transform.rotation));
  const want = mul(A, c2w(i).map((r) => r.slice(0, 3)));
  for (let r = 0; r < 3; ++r)
    for (let c = 0; c < 3; ++c) close(chain[r][c], want[r][c], 2e-6, `optical chain frame ${i}`);
});

const info = byTopic('/lingbot/camera_info').msgs;
check(info.length === S, 'one camera_info a frame');
info.forEach(({ msg }, i) => {
  check(msg.width === W && msg.height === H && msg.header.frame_id === 'lingbot_camera_optical',
        'camera_info size and frame');
  for (let k = 0; k < 9; ++k) check(msg.k[k] === pred.intrinsics.data[i * 9 + k], `K[${k}] frame ${i}`);
  check(msg.p[0] === msg.k[0] && msg.p[2] === msg.k[2] && msg.p[3] === 0, 'P = [K | 0]');
});

for (const [topic, key] of [['/lingbot/depth', 'depth'], ['/lingbot/confidence', 'depth_conf']]) {
  const imgs = byTopic(topic).msgs;
  check(imgs.length === S, `${topic}: one a frame`);
  imgs.forEach(({ msg }, i) => {
    check(msg.encoding === '32FC1' && msg.width === W && msg.height === H && msg.step === 4 * W &&
          msg.is_bigendian === 0, `${topic} layout`);
    const got = new Float32Array(new Uint8Array(msg.data).buffer);
    const want = pred[key].data.subarray(i * H * W, (i + 1) * H * W);
    check(got.length === want.length && got.every((v, j) => v === want[j]), `${topic} frame ${i} values`);
  });
}

const images = byTopic('/lingbot/image').msgs;
check(images.length === S, 'one image a frame');
for (const { msg } of images) {
  const d = msg.data;
  check(msg.format === 'jpeg' && d[0] === 0xff && d[1] === 0xd8 && d.at(-2) === 0xff && d.at(-1) === 0xd9,
        'a whole JPEG');
  const sof = d.findIndex((b, j) => b === 0xff && d[j + 1] === 0xc0);
  check(sof > 0 && ((d[sof + 5] << 8) | d[sof + 6]) === H && ((d[sof + 7] << 8) | d[sof + 8]) === W,
        'JPEG of the frame size');
}

// Points: every keyframe's, in map; all frames are keyframes here, so they are the PLY's in order.
const clouds = byTopic('/lingbot/points').msgs;
const keyframes = pred.is_keyframe.data.reduce((s, v) => s + v, 0);
check(clouds.length === keyframes, `one cloud a keyframe (${clouds.length} of ${keyframes})`);
const names = clouds[0].msg.fields.map((f) => `${f.name}@${f.offset}:${f.datatype}`).join(' ');
check(names === 'x@0:7 y@4:7 z@8:7 rgb@12:7 confidence@16:7', `fields ${names}`);
let n = 0;
for (const { msg } of clouds) {
  check(msg.height === 1 && msg.point_step === 20 && msg.row_step === 20 * msg.width && msg.is_dense,
        'cloud layout');
  const view = new DataView(msg.data.buffer, msg.data.byteOffset, msg.data.byteLength);
  for (let p = 0; p < msg.width; ++p, ++n) {
    const q = ply[n];
    const o = p * 20;
    if (!q) break;
    check(view.getFloat32(o, true) === q.z && view.getFloat32(o + 4, true) === -q.x &&
          view.getFloat32(o + 8, true) === -q.y, `point ${n} in map`);
    check(view.getUint32(o + 12, true) === ((q.rgb[0] << 16) | (q.rgb[1] << 8) | q.rgb[2]),
          `point ${n} colour`);
    check(view.getFloat32(o + 16, true) === q.conf, `point ${n} confidence`);
  }
}
check(n === ply.length && n > 0, `as many points as the PLY (${n} of ${ply.length})`);

const paths = byTopic('/lingbot/path').msgs;
const last = paths.at(-1).msg;
check(paths.length >= 2 && last.poses.length === S, 'the last path holds every frame');
last.poses.forEach((p, i) => {
  check(stampNs(p.header.stamp) === stampOf(i) && p.header.frame_id === 'map', 'path stamps');
  checkPose(p.pose.position, p.pose.orientation, i, 'path');
});

// Cut in the middle of the last chunk: a stream reader gets every message of the chunks before.
const lastChunk = reader.chunkIndexes.at(-1);
const cut = file.subarray(0, Number(lastChunk.chunkStartOffset + lastChunk.chunkLength / 2n));
const stream = new McapStreamReader({ decompressHandlers, validateCrcs: true });
stream.append(cut);
let streamed = 0;
for (let r; (r = stream.nextRecord());) if (r.type === 'Message') ++streamed;
const before = [...topics.values()].flatMap((t) => t.msgs)
  .filter((m) => m.logTime < lastChunk.messageStartTime).length;
check(!stream.done() && streamed === before && before > 0,
      `a file cut mid-chunk reads its ${before} earlier messages (got ${streamed})`);

console.log(`mcap: ${checks} checks passed (${total} messages, ${reader.chunkIndexes.length} chunks)`);
