// Entry point: the scene, the panel, and the connection that feeds them.
import { ViewerScene } from './scene.js';
import { Connection } from './connection.js';
import { Controls } from './controls.js';

const scene = new ViewerScene(document.getElementById('view'));
let controls = null;
const connection = new Connection({
  hello: (m) => controls.hello(m),
  frame: (f) => controls.frame(f),
  image: (i) => controls.image(i),
  colours: (c) => controls.colours(c),
  status: (m) => controls.status_(m),
  closed: () => controls.closed(),
});
controls = new Controls(scene, connection);
// For tests and the console.
window.lingbotViewer = { scene, controls, connection };
