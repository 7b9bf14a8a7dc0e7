// The playground page: wires the HTTP API, the shared WebSocket, the lanes and the clone form.
// window.__playground exposes read-only state for debugging and the browser tests (no credential in it).

import { Api, ApiError } from "./api.js";
import { Lane } from "./lane.js";
import { MicRecorder } from "./recorder.js";
import { TtsSocket } from "./socket.js";

const $ = (id) => document.getElementById(id);

class App {
  constructor() {
    this.api = new Api(new URL("../", window.location.href));
    this.socket = new TtsSocket(() => this.api.socketUrl(), (...status) => this.onSocketStatus(...status));
    this.voices = [];
    this.lanes = [];
    this.audioContext = null;
    this.recorder = new MicRecorder();
    this.recorded = null;  // WAV Blob of the last microphone recording
    this.notices = [];
    this.voicesLoaded = 0;
    // ?voices_page_size=N lists voices N at a time (the tests walk several pages with it)
    const size = Number.parseInt(new URLSearchParams(window.location.search).get("voices_page_size"), 10);
    this.voicesPageSize = size >= 1 && size <= 100 ? size : 100;
  }

  // -- shared pieces the lanes use ------------------------------------------------------------

  /** The page's AudioContext, made (and resumed) on first use: browsers allow that after a gesture. */
  audio() {
    if (!this.audioContext) this.audioContext = new AudioContext({ latencyHint: "interactive" });
    if (this.audioContext.state === "suspended") this.audioContext.resume().catch(() => {});
    return this.audioContext;
  }

  requestFields() {
    return {
      model_id: $("model-id").value.trim() || "sonic-3",
      output_format: { container: "raw", encoding: $("encoding").value, sample_rate: Number($("sample-rate").value) },
    };
  }

  notify(message) {
    const el = $("notice");
    el.hidden = !message;
    el.textContent = message || "";
    if (message) this.notices.push(message);
  }

  // -- start-up, voices and auth ----------------------------------------------------------------

  async start() {
    $("add-lane").addEventListener("click", () => this.addLane().el.text.focus());
    $("forget-key").addEventListener("click", () => this.forgetKey());
    $("enter-key").addEventListener("click", () => this.askKey(""));
    $("auth-dialog").addEventListener("cancel", () => this.keyDialogCancelled());
    $("auth-form").addEventListener("submit", (e) => this.submitKey(e));
    $("clone-form").addEventListener("submit", (e) => this.clone(e));
    $("record").addEventListener("click", () => this.toggleRecording());
    $("clone-file").addEventListener("change", () => { this.recorded = null; $("record-preview").hidden = true; });
    for (const id of ["encoding", "sample-rate", "model-id"]) {
      $(id).addEventListener("change", () => this.lanes.forEach((lane) => lane.endStream()));
    }
    window.addEventListener("pagehide", () => this.socket.close());
    this.addLane();
    await this.loadVoices();
    this.animate();
  }

  addLane() {
    const lane = new Lane(this, $("lane-template"), $("lanes"));
    this.lanes.push(lane);
    this.updateLaneButtons();
    return lane;
  }

  removeLane(lane) {
    lane.dispose();
    this.lanes = this.lanes.filter((l) => l !== lane);
    this.updateLaneButtons();
    $("add-lane").focus();
  }

  updateLaneButtons() {
    for (const lane of this.lanes) lane.el.remove.hidden = this.lanes.length === 1;
  }

  async loadVoices() {
    try {
      this.voices = await this.api.listVoices(this.voicesPageSize);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        this.keyRefused("The stored key was not accepted; enter a key.");
        return;
      }
      this.notify(`Could not list voices: ${err.message}`);
      return;
    }
    this.voicesLoaded += 1;
    for (const lane of this.lanes) lane.fillVoices(this.voices);
    this.renderOwnedVoices();
    this.renderAuth();
  }

  askKey(error) {
    const dialog = $("auth-dialog");
    $("auth-error").hidden = !error;
    $("auth-error").textContent = error || "";
    if (!dialog.open) dialog.showModal();
    $("auth-key").focus();
  }

  async submitKey(event) {
    event.preventDefault();
    const input = $("auth-key");
    const key = input.value.trim();
    if (!key) return this.askKey("Enter an API key.");
    this.api.setKey(key, $("auth-remember").checked);
    input.value = "";
    try {
      this.voices = await this.api.listVoices(this.voicesPageSize);
    } catch (err) {
      this.api.forgetKey();
      return this.askKey(err instanceof ApiError && err.status === 401 ? "That key was not accepted." : err.message);
    }
    $("auth-dialog").close();
    this.voicesLoaded += 1;
    for (const lane of this.lanes) lane.fillVoices(this.voices);
    this.renderOwnedVoices();
    this.renderAuth();
    this.lanes[0]?.el.text.focus();
  }

  /** A 401: the key (if any) is dropped, as a refused new key is, so the page says "no key" and asks. */
  keyRefused(error) {
    const had = Boolean(this.api.key);
    this.api.forgetKey();
    this.renderAuth();
    this.askKey(had ? error : "");
  }

  /** Escape on the key dialog: nothing lists or speaks without a key, so say where to enter one. */
  keyDialogCancelled() {
    this.renderAuth();
    if (this.api.authRequired && !this.api.key) {
      this.notify("This server needs an API key to list voices and speak: “Enter API key” at the top asks for one.");
    }
  }

  forgetKey() {
    this.api.forgetKey();
    this.socket.close();
    this.renderAuth();
    this.askKey("");
  }

  /** "Forget key" while a key is set; "Enter API key" while the server wants one and none is set (the
   * dialog can be dismissed, and a socket's 401 forgets the key: this keeps a way back to it). */
  renderAuth() {
    const key = Boolean(this.api.key);
    $("auth-bar").hidden = !key && !this.api.authRequired;
    $("auth-state").textContent = key ? "API key set for this tab" : "No API key";
    $("forget-key").hidden = !key;
    $("enter-key").hidden = key;
  }

  onSocketStatus(state, event, error) {
    const text = {
      connecting: "Connecting…", open: "Connected", closed: "Disconnected (reconnects on the next message)",
      failed: "Could not connect",
    }[state] || state;
    $("connection").textContent = text;
    $("connection").dataset.state = state;
    if (state !== "failed") return;
    if (!error) {
      this.notify(`The WebSocket could not connect${event ? ` (code ${event.code})` : ""}.`);
      return;
    }
    // no socket was made: its access token could not be minted
    this.notify(`The WebSocket could not connect: no access token (${error.message}).`);
    if (error instanceof ApiError && error.status === 401) {
      this.keyRefused("The key was not accepted for the WebSocket (was it revoked?); enter a key.");
    }
  }

  // -- cloning ------------------------------------------------------------------------------------

  renderOwnedVoices() {
    const list = $("owned-voices");
    const owned = this.voices.filter((v) => v.is_owner);
    if (!owned.length) {
      const li = document.createElement("li");
      li.textContent = "None yet: clone one above.";
      list.replaceChildren(li);
      return;
    }
    list.replaceChildren(...owned.map((voice) => {
      const li = document.createElement("li");
      li.dataset.voiceId = voice.id;
      const name = document.createElement("span");
      name.textContent = `${voice.name} (${voice.language})`;
      const use = document.createElement("button");
      use.type = "button";
      use.textContent = "Use";
      use.setAttribute("aria-label", `Use voice ${voice.name} in context 1`);
      use.addEventListener("click", () => this.lanes[0]?.selectVoice(voice.id));
      const del = document.createElement("button");
      del.type = "button";
      del.textContent = "Delete";
      del.className = "danger";
      del.setAttribute("aria-label", `Delete voice ${voice.name}`);
      del.addEventListener("click", () => this.deleteVoice(voice));
      li.append(name, " ", use, " ", del);
      return li;
    }));
  }

  async deleteVoice(voice) {
    const status = $("clone-status");
    try {
      await this.api.deleteVoice(voice.id);
      status.textContent = `Deleted “${voice.name}”.`;
    } catch (err) {
      status.textContent = `Could not delete “${voice.name}”: ${err.message}`;
    }
    await this.loadVoices();
  }

  async toggleRecording() {
    const button = $("record");
    const state = $("record-state");
    if (!MicRecorder.supported) {
      state.textContent = "This browser cannot record here (a microphone needs https or localhost).";
      return;
    }
    try {
      if (!this.recorder.recording) {
        await this.recorder.start();
        button.textContent = "Stop recording";
        button.setAttribute("aria-pressed", "true");
        state.textContent = "Recording… speak for 5 to 15 seconds.";
        return;
      }
      this.recorded = await this.recorder.stop(this.audio());
      button.textContent = "Record from microphone";
      button.setAttribute("aria-pressed", "false");
      $("clone-file").value = "";
      const preview = $("record-preview");
      if (preview.src) URL.revokeObjectURL(preview.src);
      preview.src = URL.createObjectURL(this.recorded);
      preview.hidden = false;
      state.textContent = `Recorded ${(this.recorded.size / 1024).toFixed(0)} KiB; Clone uploads it.`;
    } catch (err) {
      button.textContent = "Record from microphone";
      button.setAttribute("aria-pressed", "false");
      state.textContent = `Recording failed: ${err.message}`;
    }
  }

  async clone(event) {
    event.preventDefault();
    const status = $("clone-status");
    const name = $("clone-name").value.trim();
    const file = $("clone-file").files[0];
    const clip = file || this.recorded;
    if (!name) {
      status.textContent = "Give the voice a name.";
      $("clone-name").focus();
      return;
    }
    if (!clip) {
      status.textContent = "Choose an audio file or record one.";
      return;
    }
    status.textContent = "Cloning…";
    $("clone-submit").disabled = true;
    try {
      const voice = await this.api.cloneVoice({
        clip, filename: file ? file.name : "recording.wav", name, language: $("clone-language").value,
      });
      await this.loadVoices();
      this.lanes[0]?.selectVoice(voice.id);
      status.textContent = `Cloned “${voice.name}”; selected in context 1.`;
    } catch (err) {
      status.textContent = `Clone failed: ${err.message}`;
    } finally {
      $("clone-submit").disabled = false;
    }
  }

  // -- playback view ---------------------------------------------------------------------------------

  animate() {
    const frame = () => {
      if (this.audioContext) {
        const now = this.audioContext.currentTime;
        for (const lane of this.lanes) lane.tick(now);
      }
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  }

  snapshot() {
    return {
      voices: this.voices.map((v) => ({ id: v.id, name: v.name, is_owner: v.is_owner })),
      voicesLoaded: this.voicesLoaded,
      authRequired: this.api.authRequired,
      hasKey: Boolean(this.api.key),
      socket: { open: this.socket.isOpen, opens: this.socket.opens, received: this.socket.received,
        sent: this.socket.sent.map(summary), orphans: this.socket.orphans.slice() },
      audio: this.audioContext ? { state: this.audioContext.state, sampleRate: this.audioContext.sampleRate,
        currentTime: this.audioContext.currentTime } : null,
      lanes: this.lanes.map((lane) => lane.snapshot()),
      notices: this.notices.slice(),
    };
  }
}

/** What the debug view shows of a sent message (the request fields that vary, no audio). */
function summary(m) {
  const out = { context_id: m.context_id };
  for (const key of ["transcript", "continue", "flush", "cancel", "language", "temperature", "seed",
    "generation_config", "max_buffer_delay_ms", "model_id", "output_format", "add_timestamps",
    "add_phoneme_timestamps"]) {
    if (key in m) out[key] = m[key];
  }
  if (m.voice) out.voice = m.voice.id;
  return out;
}

const app = new App();
window.__playground = {
  snapshot: () => app.snapshot(),
  lane: (i) => app.lanes[i].snapshot(),
  /** Sends a raw message on the page's socket (tests use it as an ordering probe). */
  sendRaw: (message) => app.socket.send(message),
};
app.start().catch((err) => app.notify(`The playground failed to start: ${err.message}`));
