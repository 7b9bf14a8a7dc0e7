// HTTP side of the server: voices, clone, delete, access tokens. The API key travels only in the
// Authorization header (never in a URL) and lives in memory, or in sessionStorage when the user
// allows it (gone when the tab closes).

export const CARTESIA_VERSION = "2026-08-14";
const KEY_STORAGE = "gepard-playground-api-key";
const TOKEN_TTL_S = 60; // only the WebSocket upgrade needs it; a reconnect mints a new one

export class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.message || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

export class Api {
  /** @param {URL} root the server's root URL (the page lives at root/playground/) */
  constructor(root) {
    this.root = root;
    this.authRequired = false;
    this.key = sessionStorage.getItem(KEY_STORAGE) || null;
  }

  setKey(key, remember) {
    this.key = key || null;
    if (key && remember) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  }

  forgetKey() {
    this.setKey(null, false);
  }

  url(path) {
    return new URL(path, this.root);
  }

  async request(path, init = {}) {
    const headers = new Headers(init.headers || {});
    headers.set("Cartesia-Version", CARTESIA_VERSION);
    if (this.key) headers.set("Authorization", `Bearer ${this.key}`);
    const response = await fetch(this.url(path), { ...init, headers, credentials: "omit", cache: "no-store" });
    if (response.status === 401) this.authRequired = true;
    if (!response.ok) {
      let body = null;
      try { body = await response.json(); } catch { /* not JSON */ }
      throw new ApiError(response.status, body);
    }
    return response;
  }

  /** Every voice, walking the cursor pages the way the SDKs do (until an empty page). */
  async listVoices(pageSize = 100) {
    const voices = [];
    let after = null;
    for (let page = 0; page < 10000; page++) {
      const q = new URLSearchParams({ limit: String(pageSize) });
      if (after) q.set("starting_after", after);
      const body = await (await this.request(`voices?${q}`)).json();
      if (!body.data || body.data.length === 0) break;
      voices.push(...body.data);
      after = body.data[body.data.length - 1].id;
    }
    return voices;
  }

  /** POST /voices/clone with a clip (File or Blob) -> VoiceMetadata. */
  async cloneVoice({ clip, filename, name, language }) {
    const form = new FormData();
    form.set("clip", clip, filename);
    form.set("name", name);
    form.set("language", language);
    return (await this.request("voices/clone", { method: "POST", body: form })).json();
  }

  async deleteVoice(id) {
    await this.request(`voices/${encodeURIComponent(id)}`, { method: "DELETE" });
  }

  /** A short-lived token with the tts grant, minted with the key (POST /access-token). */
  async mintToken() {
    const response = await this.request("access-token", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ grants: { tts: true }, expires_in: TOKEN_TTL_S }),
    });
    return (await response.json()).token;
  }

  /** ws(s)://.../tts/websocket with the version, and an access token (never the key) when auth is on. */
  async socketUrl() {
    const url = this.url("tts/websocket");
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("cartesia_version", CARTESIA_VERSION);
    // with a key (a stored one, too, before any 401 was seen) the socket gets a token minted with it
    if (this.authRequired || this.key) url.searchParams.set("access_token", await this.mintToken());
    return url.toString();
  }
}
