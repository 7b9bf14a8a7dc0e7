// Raw PCM from chunk events -> Float32 samples for Web Audio.
// Chunks are cut on sample boundaries by the server; a stray partial sample is carried over anyway.

/** Bytes per sample of each raw encoding the playground asks for. */
export const SAMPLE_BYTES = Object.freeze({ pcm_f32le: 4, pcm_s16le: 2 });

export function base64ToBytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Decodes little-endian PCM, keeping any trailing partial sample for the next call. */
export class PcmDecoder {
  constructor(encoding) {
    const width = SAMPLE_BYTES[encoding];
    if (!width) throw new Error(`unsupported encoding ${encoding}`);
    this.encoding = encoding;
    this.width = width;
    this.carry = new Uint8Array(0);
  }

  /** @param {Uint8Array} bytes @returns {Float32Array} */
  decode(bytes) {
    if (this.carry.length) {
      const joined = new Uint8Array(this.carry.length + bytes.length);
      joined.set(this.carry);
      joined.set(bytes, this.carry.length);
      bytes = joined;
    }
    const n = Math.floor(bytes.length / this.width);
    this.carry = bytes.slice(n * this.width);
    const view = new DataView(bytes.buffer, bytes.byteOffset, n * this.width);
    const out = new Float32Array(n);
    if (this.width === 4) {
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
    } else {
      for (let i = 0; i < n; i++) out[i] = view.getInt16(i * 2, true) / 32768;
    }
    return out;
  }
}
