// PNG encoding of RGBA pixels (8-bit, colour type 6), with no dependencies and no node:* imports.
// One decision to know: compression is pluggable — by default the image data is written as stored
// (uncompressed) deflate blocks, which every decoder reads; the CLI passes node:zlib's deflateSync to get
// small files, and the browser uses canvas.toBlob instead.

/** Pixels in RGBA order, row-major, 4 bytes each (the layout of canvas ImageData). */
export interface RgbaImage {
  width: number;
  height: number;
  data: Uint8ClampedArray;
}
/** Compresses bytes into a zlib stream (RFC 1950), e.g. node:zlib's `deflateSync`. */
export type ZlibDeflate = (bytes: Uint8Array) => Uint8Array;

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 (ISO 3309, as PNG chunks use). */
export function crc32(bytes: Uint8Array, start = 0, end = bytes.length): number {
  let c = 0xffffffff;
  for (let i = start; i < end; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function adler32(bytes: Uint8Array): number {
  let a = 1;
  let b = 0;
  for (let i = 0; i < bytes.length; ) {
    const end = Math.min(bytes.length, i + 5552); // largest run before the sums can overflow 2^32
    for (; i < end; i++) {
      a += bytes[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return ((b << 16) | a) >>> 0;
}

/** A zlib stream of stored (uncompressed) deflate blocks: valid everywhere, no smaller than the input. */
export function zlibStored(bytes: Uint8Array): Uint8Array {
  const blocks = Math.max(1, Math.ceil(bytes.length / 65535));
  const out = new Uint8Array(2 + blocks * 5 + bytes.length + 4);
  out[0] = 0x78; // deflate, 32K window
  out[1] = 0x01; // no preset dictionary, fastest; (0x78·256 + 0x01) % 31 = 0
  let o = 2;
  for (let b = 0; b < blocks; b++) {
    const start = b * 65535;
    const len = Math.min(65535, bytes.length - start);
    out[o++] = b === blocks - 1 ? 1 : 0; // BFINAL, BTYPE = 00 (stored)
    out[o++] = len & 0xff;
    out[o++] = len >>> 8;
    out[o++] = ~len & 0xff;
    out[o++] = (~len >>> 8) & 0xff;
    out.set(bytes.subarray(start, start + len), o);
    o += len;
  }
  const adler = adler32(bytes);
  out[o++] = adler >>> 24;
  out[o++] = (adler >>> 16) & 0xff;
  out[o++] = (adler >>> 8) & 0xff;
  out[o++] = adler & 0xff;
  return out;
}

function chunk(type: string, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, body.length);
  for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i);
  out.set(body, 8);
  view.setUint32(8 + body.length, crc32(out, 4, 8 + body.length));
  return out;
}

/** Encodes RGBA pixels as a PNG file. */
export function encodePng(image: RgbaImage, options: { deflate?: ZlibDeflate } = {}): Uint8Array {
  const { width, height, data } = image;
  if (!Number.isSafeInteger(width) || !Number.isSafeInteger(height) || width < 1 || height < 1) {
    throw new RangeError(`encodePng: width and height must be positive integers, got ${width}×${height}`);
  }
  if (data.length !== width * height * 4) {
    throw new RangeError(
      `encodePng: data has ${data.length} bytes but ${width}×${height} RGBA needs ${width * height * 4}`,
    );
  }
  // Each scanline starts with its filter type; 0 (None) keeps the encoder simple and exact.
  const raw = new Uint8Array(height * (1 + width * 4));
  for (let y = 0; y < height; y++) {
    raw.set(data.subarray(y * width * 4, (y + 1) * width * 4), y * (1 + width * 4) + 1);
  }
  const ihdr = new Uint8Array(13);
  const v = new DataView(ihdr.buffer);
  v.setUint32(0, width);
  v.setUint32(4, height);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 6; // colour type RGBA
  const parts = [
    new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', (options.deflate ?? zlibStored)(raw)),
    chunk('IEND', new Uint8Array(0)),
  ];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Reads a PNG's signature and IHDR: its size, or an error naming what is wrong. */
export function readPngSize(bytes: Uint8Array): { width: number; height: number } {
  const sig = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (bytes.length < 33 || sig.some((b, i) => bytes[i] !== b)) {
    throw new Error(`readPngSize: not a PNG (${bytes.length} bytes, bad signature or too short)`);
  }
  const type = String.fromCharCode(...bytes.subarray(12, 16));
  if (type !== 'IHDR') throw new Error(`readPngSize: first chunk is '${type}', expected 'IHDR'`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(29) !== crc32(bytes, 12, 29)) throw new Error('readPngSize: IHDR CRC mismatch');
  return { width: view.getUint32(16), height: view.getUint32(20) };
}
