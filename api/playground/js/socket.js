// One /tts/websocket for the whole page; contexts multiplex on it (each lane is one context at a time).
// Messages are routed to their context by context_id; a message for a context nobody listens to is
// kept in `orphans` (a cancelled context is still listened to, so late audio is counted, not lost).

export class TtsSocket {
  /**
   * @param {() => Promise<string>} urlFor the URL to open (mints an access token when auth is on)
   * @param {(state: string, event?: CloseEvent, error?: Error) => void} onStatus connecting | open |
   *   closed | failed; a failure before any socket existed (no URL) comes with the error instead of an event
   */
  constructor(urlFor, onStatus = () => {}) {
    this.urlFor = urlFor;
    this.onStatus = onStatus;
    this.ws = null;
    this.opening = null;
    this.handlers = new Map();
    this.orphans = [];
    this.sent = [];      // every message sent, for the debug view and tests (no credentials in them)
    this.received = 0;
    this.opens = 0;
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** Opens the socket unless it is open; resolves once it can send. */
  ensureOpen() {
    if (this.isOpen) return Promise.resolve();
    if (!this.opening) {
      this.opening = this._open().finally(() => { this.opening = null; });
    }
    return this.opening;
  }

  async _open() {
    this.onStatus("connecting");
    let url;
    try {
      url = await this.urlFor();
    } catch (err) {
      // No URL, no socket (the token mint was refused, or never reached the server): report it, or
      // the status would stay "connecting" with nothing left to change it.
      this.onStatus("failed", null, err);
      throw err;
    }
    await new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      let opened = false;
      ws.onopen = () => {
        opened = true;
        this.ws = ws;
        this.opens += 1;
        this.onStatus("open");
        resolve();
      };
      ws.onmessage = (event) => this._receive(event.data);
      ws.onerror = () => {
        if (!opened) reject(new Error("the WebSocket could not connect (refused, or its credential was rejected)"));
      };
      ws.onclose = (event) => {
        if (this.ws === ws) this.ws = null;
        this.onStatus(opened ? "closed" : "failed", event);
        if (!opened) reject(new Error(`the WebSocket closed before opening (code ${event.code})`));
        for (const handler of [...this.handlers.values()]) handler.onSocketClosed?.(event);
      };
    });
  }

  listen(contextId, handler) {
    this.handlers.set(contextId, handler);
  }

  forget(contextId) {
    this.handlers.delete(contextId);
  }

  async send(message) {
    await this.ensureOpen();
    this.sent.push(message);
    if (this.sent.length > 500) this.sent.splice(0, this.sent.length - 500);
    this.ws.send(JSON.stringify(message));
  }

  _receive(data) {
    this.received += 1;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      this.orphans.push({ type: "unparsable" });
      return;
    }
    const handler = this.handlers.get(msg.context_id);
    if (handler) handler.onMessage(msg);
    else this.orphans.push({ type: msg.type, context_id: msg.context_id, message: msg.message });
  }

  close() {
    if (this.ws) this.ws.close(1000, "page closed");
  }
}
