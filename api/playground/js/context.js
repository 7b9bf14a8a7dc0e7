// One synthesis context on the shared socket: what it sent, what came back, its player and figures.
//
// Figures, per turn (a turn starts when text is sent while none is owed, and ends when all of it
// was spoken: its word timestamps came back, or a flush_done / done):
//   time to first audio  the turn's first send -> its first chunk (what a voice agent waits)
//   RTF                  the server's step_time summed over chunks / seconds of audio (< 1: faster than real time)
//   underrun             silence the player had to insert inside a turn (see player.js)

import { PcmDecoder, base64ToBytes } from "./pcm.js";
import { Player } from "./player.js";
import { countWords } from "./typing.js";

export class SpeechContext {
  /**
   * @param {object} o
   * @param {string} o.id context_id
   * @param {import("./socket.js").TtsSocket} o.socket
   * @param {AudioContext} o.audio
   * @param {object} o.request fields every generation message of this context carries
   * @param {() => void} o.onChange called after anything visible changed
   */
  constructor({ id, socket, audio, request, onChange }) {
    this.id = id;
    this.socket = socket;
    this.request = request;
    this.onChange = onChange;
    this.encoding = request.output_format.encoding;
    this.sampleRate = request.output_format.sample_rate;
    this.decoder = new PcmDecoder(this.encoding);
    this.player = new Player(audio, this.sampleRate);
    this.state = "open"; // open | closing | done | cancelled | failed
    this.sentText = "";  // everything sent, for the word count (a tag may arrive in pieces)
    this.sentWords = 0;
    this.spokenWords = 0;
    this.turnOpen = false;
    this.turnStart = 0;
    this.turnHeard = false;
    this.ttfas = [];
    this.stepTimeMs = 0;
    this.chunkCount = 0;
    this.words = [];      // {word, start, end} in the context's own seconds
    this.phonemes = [];   // {phoneme, start, end} likewise (phoneme_timestamps: IPA, for lip-sync)
    this.flushes = 0;
    this.errors = [];
    this.cancelledAt = null;
    this.lateChunks = 0;  // chunks received after this page sent cancel
    this.lateEvents = []; // types of every event received after cancel
    this.bytes = 0;       // audio bytes received
    this.highlighted = new Set();
    this.phonemesShown = new Set();  // phonemes that were the one heard at some frame
    socket.listen(id, this);
  }

  get live() {
    return this.state === "open";
  }

  get finished() {
    return this.state !== "open" && this.state !== "closing";
  }

  get rtf() {
    const audioS = this.player.frames / this.sampleRate;
    return audioS > 0 ? this.stepTimeMs / 1000 / audioS : null;
  }

  /** Sends text; `last` ends the context (continue: false), `flush` asks for what is buffered. */
  async send(transcript, { last = false, flush = false } = {}) {
    if (this.state !== "open") throw new Error(`context ${this.id} is ${this.state}`);
    if (transcript.trim() && !this.turnOpen) {
      this.turnOpen = true;
      this.turnStart = performance.now();
      this.turnHeard = false;
    }
    this.sentText += transcript;
    this.sentWords = countWords(this.sentText);
    const message = { ...this.request, context_id: this.id, transcript, continue: !last };
    if (flush) message.flush = true;
    if (last) this.state = "closing";
    await this.socket.send(message);
  }

  /** Stop: cancel on the wire, silence at once. Later chunks are only counted. */
  cancel() {
    if (this.finished) {
      this.player.stop();
      return;
    }
    this.state = "cancelled";
    this.cancelledAt = performance.now();
    this.player.stop();
    this.turnOpen = false;
    this.socket.send({ context_id: this.id, cancel: true }).catch(() => {});
    this.onChange();
  }

  onMessage(msg) {
    if (this.state === "cancelled") {
      if (msg.type === "chunk") this.lateChunks += 1;
      this.lateEvents.push(msg.type);
      return;
    }
    switch (msg.type) {
      case "chunk": {
        const bytes = base64ToBytes(msg.data || "");
        this.bytes += bytes.length;
        const samples = this.decoder.decode(bytes);
        this.player.push(samples, this.turnOpen && this.turnHeard);
        if (this.turnOpen && !this.turnHeard) {
          this.turnHeard = true;
          this.ttfas.push(performance.now() - this.turnStart);
        }
        this.chunkCount += 1;
        this.stepTimeMs += Number(msg.step_time) || 0;
        break;
      }
      case "timestamps": {
        const wt = msg.word_timestamps || { words: [], start: [], end: [] };
        wt.words.forEach((word, i) => this.words.push({ word, start: wt.start[i], end: wt.end[i] }));
        this.spokenWords += wt.words.length;
        if (this.spokenWords >= this.sentWords) this.turnOpen = false;
        break;
      }
      case "phoneme_timestamps": {
        const pt = msg.phoneme_timestamps || { phonemes: [], start: [], end: [] };
        pt.phonemes.forEach((phoneme, i) => this.phonemes.push({ phoneme, start: pt.start[i], end: pt.end[i] }));
        break;
      }
      case "flush_done":
        this.flushes += 1;
        this.turnOpen = false;
        break;
      case "done":
        this.state = "done";
        this.turnOpen = false;
        break;
      case "error":
        this.state = "failed";
        this.turnOpen = false;
        this.errors.push(`${msg.title || "Error"}: ${msg.message || msg.error || ""} (${msg.error_code || msg.status_code})`);
        break;
      default:
        break;
    }
    this.onChange();
  }

  onSocketClosed(event) {
    if (this.finished) return;
    this.state = "failed";
    this.errors.push(`the WebSocket closed (code ${event.code}${event.reason ? `: ${event.reason}` : ""})`);
    this.onChange();
  }

  /** Index of the word being heard now, or -1. */
  currentWord(now) {
    for (let i = 0; i < this.words.length; i++) {
      const w = this.words[i];
      if (this.player.timeOf(w.start) <= now && now < this.player.timeOf(w.end)) return i;
    }
    return -1;
  }

  /** Index of the phoneme being heard now, or -1 (their times only grow: a binary search). */
  currentPhoneme(now) {
    let lo = 0;
    let hi = this.phonemes.length - 1;
    while (lo <= hi) {  // the last phoneme starting at or before now
      const mid = (lo + hi) >> 1;
      if (this.player.timeOf(this.phonemes[mid].start) <= now) lo = mid + 1;
      else hi = mid - 1;
    }
    return hi >= 0 && now < this.player.timeOf(this.phonemes[hi].end) ? hi : -1;
  }

  dispose() {
    this.player.stop();
    this.socket.forget(this.id);
  }

  /** Plain data for the debug view and the browser tests. */
  snapshot() {
    const p = this.player;
    return {
      id: this.id,
      state: this.state,
      encoding: this.encoding,
      sampleRate: this.sampleRate,
      chunks: this.chunkCount,
      bytes: this.bytes,
      samples: p.frames,
      audioSeconds: p.frames / this.sampleRate,
      schedule: p.chunks.map((c) => ({ ...c })),
      runs: p.runs,
      underrunS: p.underrunS,
      underruns: p.underruns,
      activeSources: p.sources.size,
      stopped: p.stopped,
      ttfaMs: this.ttfas.slice(),
      rtf: this.rtf,
      words: this.words.map((w) => ({ ...w })),
      phonemes: this.phonemes.map((p) => ({ ...p })),
      phonemesShown: this.phonemesShown.size,
      sentWords: this.sentWords,
      flushes: this.flushes,
      errors: this.errors.slice(),
      lateChunks: this.lateChunks,
      lateEvents: this.lateEvents.slice(),
      highlighted: this.highlighted.size,
    };
  }
}
