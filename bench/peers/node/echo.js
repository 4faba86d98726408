// The Node.js peer: the `ws` package's echo server with its defaults (permessage-deflate
// off, as it ships), one process, one core. Usage: node echo.js PORT
const { WebSocketServer } = require('ws');
const port = Number(process.argv[2] || 9201);
const wss = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 16 << 20 });
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('error', () => {});
});
wss.on('listening', () => console.error(`node-ws listening on ws://127.0.0.1:${port}/`));
