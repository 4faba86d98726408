// The Node.js peer: the `ws` package's echo server with its defaults (permessage-deflate
// off, as it ships), one process, one core. Usage: node echo.js PORT [broadcast]
// `broadcast` sends every message to every open client (the sender included), the loop the
// ws README shows for a broadcast server: one send() per client, each framing the message.
const { WebSocketServer, WebSocket } = require('ws');
const port = Number(process.argv[2] || 9201);
const broadcast = process.argv[3] === 'broadcast';
const wss = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 16 << 20 });
wss.on('connection', (ws) => {
  if (broadcast) {
    ws.on('message', (data, isBinary) => {
      for (const c of wss.clients) if (c.readyState === WebSocket.OPEN) c.send(data, { binary: isBinary });
    });
  } else {
    ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  }
  ws.on('error', () => {});
});
wss.on('listening', () => console.error(`node-ws listening on ws://127.0.0.1:${port}/`));
