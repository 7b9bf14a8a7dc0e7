// Gapless playback of one context's PCM with Web Audio.
//
// Chunks are scheduled back to back on the AudioContext clock at the context's own sample rate
// (AudioBuffers at that rate; the AudioContext resamples to the device). A "run" is a stretch of
// back-to-back audio: each chunk starts exactly where the run's previous one ends, counted in
// whole samples from the run's start (no drift from adding rounded durations). When a chunk comes
// after the run has played out, a new run starts a little ahead of now; if that happens in the
// middle of a turn (text was sent and not all spoken yet) the silence is an underrun, the time
// the listener waited for audio.

/** How far ahead of the clock a new run starts: room for the scheduling itself. */
export const LEAD_S = 0.06;
/** A run ending sooner than this cannot take one more chunk seamlessly. */
const MIN_AHEAD_S = 0.005;

export class Player {
  /** @param {AudioContext} audio @param {number} sampleRate the rate of the PCM pushed */
  constructor(audio, sampleRate) {
    this.audio = audio;
    this.rate = sampleRate;
    this.out = audio.createGain();
    this.out.connect(audio.destination);
    this.runStart = null;  // AudioContext time of the current run's first sample
    this.runFrames = 0;    // samples in the current run
    this.frames = 0;       // samples of this context scheduled so far
    this.chunks = [];      // {frame, frames, at, run}: one per chunk, in order
    this.runs = 0;
    this.sources = new Set();
    this.underrunS = 0;
    this.underruns = 0;
    this.stopped = false;
  }

  /** AudioContext time at which the audio scheduled so far ends (null before the first chunk). */
  get endTime() {
    return this.runStart === null ? null : this.runStart + this.runFrames / this.rate;
  }

  get playing() {
    return !this.stopped && this.endTime !== null && this.endTime > this.audio.currentTime;
  }

  /**
   * Schedules samples right after what is scheduled.
   * @param {Float32Array} samples
   * @param {boolean} midTurn true when the listener is owed audio (a gap here is an underrun)
   * @returns {number|null} the AudioContext time the chunk starts, or null when stopped
   */
  push(samples, midTurn) {
    if (this.stopped || samples.length === 0) return null;
    const now = this.audio.currentTime;
    const end = this.endTime;
    if (end === null || end < now + MIN_AHEAD_S) {
      const start = now + LEAD_S;
      if (end !== null && midTurn) {
        this.underrunS += start - end;
        this.underruns += 1;
      }
      this.runStart = start;
      this.runFrames = 0;
      this.runs += 1;
    }
    const at = this.runStart + this.runFrames / this.rate;
    const buffer = this.audio.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    const source = this.audio.createBufferSource();
    source.buffer = buffer;
    source.connect(this.out);
    source.onended = () => this.sources.delete(source);
    source.start(at);
    this.sources.add(source);
    this.chunks.push({ frame: this.frames, frames: samples.length, at, run: this.runs });
    this.runFrames += samples.length;
    this.frames += samples.length;
    return at;
  }

  /** AudioContext time at which the context's audio reaches `seconds` (its own timeline). */
  timeOf(seconds) {
    const frame = seconds * this.rate;
    let lo = 0;
    let hi = this.chunks.length - 1;
    if (hi < 0) return Infinity;
    while (lo < hi) {  // the last chunk starting at or before `frame`
      const mid = (lo + hi + 1) >> 1;
      if (this.chunks[mid].frame <= frame) lo = mid;
      else hi = mid - 1;
    }
    const chunk = this.chunks[lo];
    return chunk.at + (frame - chunk.frame) / this.rate;
  }

  /** Silences everything at once: scheduled sources are stopped, later pushes ignored. */
  stop() {
    this.stopped = true;
    for (const source of this.sources) {
      try { source.stop(); } catch { /* never started */ }
      source.disconnect();
    }
    this.sources.clear();
    this.out.disconnect();
  }
}
