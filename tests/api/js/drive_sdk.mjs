// Drives the published @cartesia/cartesia-js 4.2.0 against a live gateway and prints one JSON line
// of what it saw; tests/api/routes/test_js_sdk.py makes the assertions.
//
//   node [--experimental-websocket] drive_sdk.mjs <https base URL> <api key> <voice id>
//
// Loaded with `import`, the SDK takes its browser path for WebSockets (global WebSocket, the
// credentials in the query string) and always connects with wss:// to the base URL's host:port.
// The test CA comes from NODE_EXTRA_CA_CERTS.
import Cartesia, { CartesiaError, NotFoundError } from '@cartesia/cartesia-js';

const [baseURL, apiKey, voiceId] = process.argv.slice(2);
const voice = { mode: 'id', id: voiceId };
const S16_16K = { container: 'raw', encoding: 'pcm_s16le', sample_rate: 16000 };
const F32_24K = { container: 'raw', encoding: 'pcm_f32le', sample_rate: 24000 };
const out = {};

const client = new Cartesia({ apiKey, baseURL, maxRetries: 0 });
out.status = await client.getStatus();

// bytes
const response = await client.tts.generate({ model_id: 'sonic-3', transcript: 'Hello there.', voice, output_format: S16_16K });
out.bytes = { status: response.status, length: (await response.arrayBuffer()).byteLength };

// SSE with word and phoneme timestamps
const sse = { types: [], audio: 0, words: [], phonemes: [] };
for await (const event of await client.tts.generateSSE({
  model_id: 'sonic-3', transcript: 'Hello there, friend. Bye now.', voice, output_format: F32_24K, add_timestamps: true,
  add_phoneme_timestamps: true,
})) {
  sse.types.push(event.type);
  if (event.type === 'chunk') sse.audio += Buffer.from(event.data, 'base64').length;
  if (event.type === 'timestamps') sse.words.push(...event.word_timestamps.words);
  if (event.type === 'phoneme_timestamps') sse.phonemes.push(...event.phoneme_timestamps.phonemes);
}
out.sse = sse;

// WebSocket: two contexts on one socket, text in pieces with a flush, one cancelled mid-stream
async function collect(ctx) {
  const events = [];
  for await (const event of ctx.receive()) {
    events.push({ type: event.type, flush_id: event.flush_id ?? null, audio: event.audio ? event.audio.length : 0,
                  context_id: event.context_id, words: event.word_timestamps?.words ?? null,
                  phonemes: event.phoneme_timestamps?.phonemes ?? null });
  }
  return events;
}

const ws = await client.tts.websocket();
const wsErrors = [];
ws.on('error', (err) => wsErrors.push(String(err.message)));  // error events also go to the emitter
const opts = { model_id: 'sonic-3', voice, max_buffer_delay_ms: 5000 };
const a = ws.context({ ...opts, contextId: 'js-a', output_format: S16_16K, add_timestamps: true,
                       add_phoneme_timestamps: true });
const b = ws.context({ ...opts, contextId: 'js-b', output_format: F32_24K });
const c = ws.context({ ...opts, contextId: 'js-c', output_format: S16_16K });
await a.push({ transcript: 'Hello ' });
await b.push({ transcript: 'Good morning' });
await c.push({ transcript: 'One. Two. Three. Four. Five. Six. Seven. Eight.' });
await a.push({ transcript: 'there.', flush: true });
await b.push({ transcript: ', everyone.' });
for await (const event of c.receive()) {
  if (event.type === 'chunk') break;
}
await c.cancel();
await a.push({ transcript: ' How are you?' });
await a.no_more_inputs();
await b.no_more_inputs();
const [aEvents, bEvents] = await Promise.all([collect(a), collect(b)]);
out.ws = { a: aEvents, b: bEvents };

// an error event ends receive() by throwing
const bad = ws.context({ ...opts, output_format: S16_16K, voice: { mode: 'id', id: 'js-missing-voice' } });
await bad.push({ transcript: 'Hello there.' });
try {
  for await (const _ of bad.receive()) { /* nothing before the error */ }
  out.wsError = null;
} catch (err) {
  out.wsError = { isCartesiaError: err instanceof CartesiaError, message: String(err.message), emitted: wsErrors };
}
ws.close();

// access token: REST and WebSocket with the token (browser path: ?access_token=)
const { token } = await client.accessToken.create({ grants: { tts: true }, expires_in: 60 });
const tokenClient = new Cartesia({ token, baseURL, maxRetries: 0 });
const tws = await tokenClient.tts.websocket();
const t = tws.context({ ...opts, output_format: S16_16K });
await t.push({ transcript: 'With a token.' });
await t.no_more_inputs();
out.token = await collect(t);
tws.close();

// REST errors are typed
try {
  await client.tts.generate({ model_id: 'sonic-3', transcript: 'Hi.', voice: { mode: 'id', id: 'nope' }, output_format: S16_16K });
  out.restError = null;
} catch (err) {
  out.restError = { notFound: err instanceof NotFoundError, status: err.status, code: err.error?.error_code ?? null };
}
const wrong = new Cartesia({ apiKey: 'sk_wrong', baseURL, maxRetries: 0 });
try {
  await wrong.tts.generate({ model_id: 'sonic-3', transcript: 'Hi.', voice, output_format: S16_16K });
  out.authError = null;
} catch (err) {
  out.authError = { status: err.status };
}

console.log(JSON.stringify(out));
process.exit(0);
