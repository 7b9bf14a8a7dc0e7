// One lane of the page: a text box speaking through one context at a time on the shared socket.
// Several lanes make several contexts side by side on the same WebSocket.

import { SpeechContext } from "./context.js";
import { nextPiece } from "./typing.js";

let laneCount = 0;

function formatMs(ms) {
  return ms == null ? "–" : `${Math.round(ms)} ms`;
}

export class Lane {
  /**
   * @param {object} app main.js's App: socket, audio(), voices, requestFields(), notify()
   * @param {HTMLTemplateElement} template
   * @param {HTMLElement} container
   */
  constructor(app, template, container) {
    this.app = app;
    this.n = ++laneCount;
    this.contexts = [];   // every context this lane made, newest last
    this.context = null;  // the one text goes to now
    this.sent = "";       // stream mode: what of the text box was sent (or given up: stop, settings)
    this.wordsFrom = 0;   // the context's first word shown (Clear hides the ones before)
    this.phonemeShown = -1;  // the index of the phoneme marked now (-1: none)
    const root = template.content.firstElementChild.cloneNode(true);
    this.root = root;
    root.id = `lane-${this.n}`;
    root.setAttribute("aria-labelledby", `lane-${this.n}-title`);
    const $ = (sel) => root.querySelector(sel);
    this.el = {
      title: $(".lane-title"), remove: $(".remove-lane"), voice: $(".voice"), language: $(".language"),
      temperature: $(".temperature"), seed: $(".seed"), speed: $(".speed"), bufferDelay: $(".buffer-delay"),
      text: $(".text"),
      hint: $(".text-hint"), speak: $(".speak"), stop: $(".stop"), clear: $(".clear"), words: $(".words"),
      phonemes: $(".phonemes"),
      ttfa: $(".ttfa"), rtf: $(".rtf"), underrun: $(".underrun"), audioS: $(".audio-s"), state: $(".state"),
      error: $(".lane-error"), modes: [...root.querySelectorAll(".mode input")],
    };
    this.el.title.id = `lane-${this.n}-title`;
    this.el.title.textContent = `Context ${this.n}`;
    this.el.hint.id = `lane-${this.n}-hint`;
    this.el.text.setAttribute("aria-describedby", this.el.hint.id);
    for (const radio of this.el.modes) radio.name = `lane-${this.n}-mode`;
    container.append(root);
    this.fillVoices(app.voices);
    this.bind();
    this.render();
  }

  get mode() {
    return this.el.modes.find((r) => r.checked).value;
  }

  bind() {
    const { el } = this;
    el.text.addEventListener("input", (e) => {
      if (this.mode === "stream") this.streamTyped(e.inputType === "insertLineBreak");
    });
    el.text.addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        e.preventDefault();
        this.stop();
      } else if (e.key === "Enter" && this.mode === "speak" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.speak();
      }
    });
    el.speak.addEventListener("click", () => this.speak());
    el.stop.addEventListener("click", () => this.stop());
    el.clear.addEventListener("click", () => this.clear());
    el.remove.addEventListener("click", () => this.app.removeLane(this));
    // another voice, language, knob or mode applies from the next context on
    for (const input of [el.voice, el.language, el.temperature, el.seed, el.speed, el.bufferDelay, ...el.modes]) {
      input.addEventListener("change", () => this.endStream());
    }
    for (const radio of el.modes) {
      radio.addEventListener("change", () => {
        el.hint.textContent = this.mode === "stream"
          ? "Words are sent as you finish them (continue: true); Enter sends a flush; Escape stops."
          : "Speak sends the whole text as one request (Ctrl+Enter also speaks); Escape stops.";
        this.render();
      });
    }
  }

  fillVoices(voices) {
    const select = this.el.voice;
    const previous = select.value;
    select.replaceChildren(...voices.map((v) => {
      const option = document.createElement("option");
      option.value = v.id;
      option.textContent = `${v.name} (${v.language})${v.is_owner ? " · yours" : ""}`;
      return option;
    }));
    if (voices.some((v) => v.id === previous)) select.value = previous;
  }

  selectVoice(id) {
    this.el.voice.value = id;
    this.endStream();
  }

  /** The fields of this lane's next context (voice, language, knobs) over the page's (format, model). */
  request() {
    const { el } = this;
    const req = {
      ...this.app.requestFields(), voice: { mode: "id", id: el.voice.value },
      add_timestamps: true, add_phoneme_timestamps: true,
    };
    if (el.language.value) req.language = el.language.value;
    const number = (input, parse) => (input.value.trim() === "" ? null : parse(input.value));
    const temperature = number(el.temperature, Number.parseFloat);
    const seed = number(el.seed, (v) => Number.parseInt(v, 10));
    const speed = number(el.speed, Number.parseFloat);
    const delay = number(el.bufferDelay, (v) => Number.parseInt(v, 10));
    if (temperature !== null && Number.isFinite(temperature)) req.temperature = temperature;
    if (seed !== null && Number.isFinite(seed)) req.seed = seed;
    // Cartesia's speech rate (0.6-1.5): the server stretches the speech, pitch kept
    if (speed !== null && Number.isFinite(speed)) req.generation_config = { speed };
    if (delay !== null && Number.isFinite(delay)) req.max_buffer_delay_ms = delay;
    return req;
  }

  newContext() {
    const id = `lane${this.n}-${crypto.randomUUID()}`;
    const ctx = new SpeechContext({
      id, socket: this.app.socket, audio: this.app.audio(), request: this.request(),
      onChange: () => this.render(),
    });
    this.contexts.push(ctx);
    if (this.contexts.length > 20) this.contexts.shift().dispose();
    this.context = ctx;
    this.wordsFrom = 0;
    this.el.words.replaceChildren();
    this.showPhonemes(ctx, -1);
    return ctx;
  }

  /** Stream mode: send the words finished since the last send; a line break sends the rest + flush. */
  async streamTyped(lineBreak) {
    if (!this.el.voice.value) return this.showError("no voice to speak with");
    const { piece, sent } = nextPiece(this.el.text.value, this.sent, lineBreak);
    this.sent = sent;
    if (!piece && !lineBreak) return;
    if (!this.context || !this.context.live) {
      if (!piece.trim()) return;  // a flush with nothing new to say needs no context
      this.newContext();
    }
    const ctx = this.context;
    try {
      await ctx.send(piece, { flush: lineBreak });
    } catch (err) {
      this.showError(err.message);
    }
    this.render();
  }

  /** Speak mode: the whole text as one context (continue: false). */
  async speak() {
    const text = this.el.text.value;
    if (!text.trim()) return this.showError("type something to speak first");
    if (!this.el.voice.value) return this.showError("no voice to speak with");
    this.showError("");
    if (this.context && !this.context.finished) this.context.cancel();
    const ctx = this.newContext();
    try {
      await ctx.send(text, { last: true });
    } catch (err) {
      this.showError(err.message);
    }
    this.render();
  }

  /** Stop: cancel on the wire and silence now. Typing on speaks only what comes next. */
  stop() {
    if (this.context) this.context.cancel();
    this.sent = this.el.text.value;
    this.render();
  }

  /** Ends the streaming context gracefully (its audio plays out); the next words open a new one. */
  endStream() {
    const ctx = this.context;
    if (ctx && ctx.live) ctx.send("", { last: true }).catch(() => {});
    this.sent = this.el.text.value;
    this.render();
  }

  clear() {
    this.endStream();
    this.el.text.value = "";
    this.sent = "";
    if (this.context) this.wordsFrom = this.context.words.length;
    this.el.words.replaceChildren();
    this.el.phonemes.replaceChildren();
    this.el.text.focus();
  }

  showError(message) {
    this.el.error.hidden = !message;
    this.el.error.textContent = message || "";
  }

  /** Highlights the word being heard (called every animation frame while audio plays). */
  tick(now) {
    const ctx = this.context;
    if (!ctx) return;
    const stoppable = !ctx.finished || ctx.player.playing;
    if (this.el.stop.disabled === stoppable) this.el.stop.disabled = !stoppable;
    const spans = this.el.words.getElementsByTagName("span");
    while (this.wordsFrom + spans.length < ctx.words.length) {
      const span = document.createElement("span");
      span.textContent = ctx.words[this.wordsFrom + spans.length].word;
      this.el.words.append(span, " ");
    }
    const current = ctx.state === "cancelled" ? -1 : ctx.currentWord(now);
    if (current >= 0) ctx.highlighted.add(current);
    for (let i = 0; i < spans.length; i++) spans[i].classList.toggle("current", i + this.wordsFrom === current);
    const phoneme = ctx.state === "cancelled" ? -1 : ctx.currentPhoneme(now);
    if (phoneme !== this.phonemeShown) this.showPhonemes(ctx, phoneme);
  }

  /** The phonemes around the one heard (index ``k``; -1: none), that one marked, as an avatar's mouth would follow them. */
  showPhonemes(ctx, k) {
    this.phonemeShown = k;
    if (k < 0) return this.el.phonemes.replaceChildren();
    ctx.phonemesShown.add(k);
    const around = ctx.phonemes.slice(Math.max(0, k - 4), k + 5);
    const first = Math.max(0, k - 4);
    this.el.phonemes.replaceChildren(...around.map((p, i) => {
      const span = document.createElement("span");
      span.textContent = p.phoneme;
      if (first + i === k) span.className = "current";
      return span;
    }));
  }

  render() {
    const ctx = this.context;
    const { el } = this;
    el.speak.hidden = this.mode !== "speak";
    el.stop.disabled = !ctx || (ctx.finished && !ctx.player.playing);
    if (!ctx) return;
    const last = ctx.ttfas.length ? ctx.ttfas[ctx.ttfas.length - 1] : null;
    el.ttfa.textContent = formatMs(last);
    el.rtf.textContent = ctx.rtf == null ? "–" : ctx.rtf.toFixed(2);
    el.underrun.textContent = `${Math.round(ctx.player.underrunS * 1000)} ms (${ctx.player.underruns}×)`;
    el.audioS.textContent = `${(ctx.player.frames / ctx.sampleRate).toFixed(2)} s · ${ctx.chunkCount} chunks`;
    el.state.textContent = ctx.state;
    if (ctx.errors.length) this.showError(ctx.errors[ctx.errors.length - 1]);
  }

  dispose() {
    for (const ctx of this.contexts) {
      if (!ctx.finished) ctx.cancel();
      ctx.dispose();
    }
    this.root.remove();
  }

  snapshot() {
    return {
      n: this.n,
      mode: this.mode,
      voice: this.el.voice.value,
      context: this.context ? this.context.snapshot() : null,
      contexts: this.contexts.map((c) => c.id),
    };
  }
}
