// Microphone recording for cloning: MediaRecorder's compressed clip decoded by Web Audio and
// re-encoded as a WAV file, a format the clone endpoint reads everywhere.

import { encodeWav, mixDown } from "./wav.js";

export class MicRecorder {
  constructor() {
    this.recorder = null;
    this.stream = null;
    this.parts = [];
  }

  get recording() {
    return this.recorder !== null && this.recorder.state === "recording";
  }

  static get supported() {
    return Boolean(navigator.mediaDevices && navigator.mediaDevices.getUserMedia && window.MediaRecorder);
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 } });
    this.parts = [];
    this.recorder = new MediaRecorder(this.stream);
    this.recorder.ondataavailable = (e) => { if (e.data.size) this.parts.push(e.data); };
    this.recorder.start();
  }

  /** Stops and returns the clip as a WAV Blob (decoded with `audio`, an AudioContext). */
  async stop(audio) {
    const recorder = this.recorder;
    const stopped = new Promise((resolve) => { recorder.onstop = resolve; });
    recorder.stop();
    await stopped;
    for (const track of this.stream.getTracks()) track.stop();
    this.recorder = null;
    this.stream = null;
    const compressed = new Blob(this.parts, { type: recorder.mimeType });
    const decoded = await audio.decodeAudioData(await compressed.arrayBuffer());
    return encodeWav(mixDown(decoded), decoded.sampleRate);
  }
}
