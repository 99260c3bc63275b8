// Webhook signatures: check that a POST to your `callback_url` came from Kiln.
//
// When a job submitted with `callback_url` ends, the broker POSTs its final
// record (the JSON of GET /v1/executions/{id}) there, with
//
//   Kiln-Signature: t=<unix seconds>,v1=<hex>
//
// where <hex> is HMAC-SHA256, keyed with the tenant's webhook secret, of
// `${t}.` + the body exactly as sent. During a secret rotation the header
// carries several `v1=` entries; one matching is enough.
//
//   const record = verifyWebhook(secret, rawBody, req.headers['kiln-signature']);
//
// signWebhook makes the header value (to test a receiver). node:crypto only,
// no KilnClient needed, so it fits any HTTP framework.

import { Buffer } from 'node:buffer';
import { createHmac, timingSafeEqual } from 'node:crypto';

const kDefaultToleranceSec = 300;
const kDigits = /^[0-9]+$/;
const kHex64 = /^[0-9a-fA-F]{64}$/;

/**
 * A webhook that cannot be trusted: answer it with a 400 and drop it. Not a
 * KilnError: it is about a request you received, not an answer of the API.
 */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = 'WebhookVerificationError';
  }
}

/**
 * The Kiln-Signature value the broker would send for `body` at `timestamp`
 * (unix seconds or a Date; default now).
 */
export function signWebhook(secret, body, timestamp) {
  const t = String(Math.floor(seconds(timestamp ?? new Date(), 'timestamp')));
  return `t=${t},v1=${digest(key(secret), t, raw(body))}`;
}

/**
 * Checks a webhook and returns its record (the body parsed as JSON).
 *
 * `body` must be the raw body received (a Buffer of the chunks, or a string
 * of exactly those bytes): JSON parsed and stringified again is not the text
 * that was signed. `signature` is the Kiln-Signature header (undefined when
 * missing). The timestamp may be `toleranceSec` seconds off `now` (unix
 * seconds or a Date; default the clock) either way; null disables that check.
 * Throws WebhookVerificationError when the header is missing or malformed,
 * no signature matches, the timestamp is out of tolerance, or the body is not
 * a JSON object.
 */
export function verifyWebhook(secret, body, signature, { toleranceSec = kDefaultToleranceSec, now } = {}) {
  if (toleranceSec !== null && !(typeof toleranceSec === 'number' && toleranceSec > 0)) {
    throw new RangeError('toleranceSec must be a number > 0 (null disables the age check)');
  }
  const bytes = raw(body);
  const { t, candidates } = parse(signature);
  const expected = Buffer.from(digest(key(secret), t, bytes), 'latin1');
  // Every candidate is compared, in constant time each, so the time taken
  // says nothing about which entry, or how much of it, matched.
  // timingSafeEqual throws on unequal lengths: parse() let only 64-digit
  // values through, the check below says so anyway.
  let matched = false;
  for (const candidate of candidates) {
    const got = Buffer.from(candidate.toLowerCase(), 'latin1');
    if (got.length === expected.length && timingSafeEqual(got, expected)) matched = true;
  }
  if (!matched) {
    throw new WebhookVerificationError('no v1 signature matches the body (wrong secret, or the body '
      + 'was changed, e.g. parsed and re-serialised, before verifying)');
  }
  // Checked after the signature, so it speaks only of genuine deliveries: an
  // old one is a replay or a clock that is off.
  if (toleranceSec !== null) {
    const age = seconds(now ?? new Date(), 'now') - Number(t);
    if (age > toleranceSec) {
      throw new WebhookVerificationError(
        `timestamp t=${t} is ${Math.round(age)} s old, over the ${toleranceSec} s tolerance`);
    }
    if (-age > toleranceSec) {
      throw new WebhookVerificationError(`timestamp t=${t} is ${Math.round(-age)} s in the future, `
        + `over the ${toleranceSec} s tolerance (is a clock off?)`);
    }
  }
  let record;
  try {
    // fatal: invalid UTF-8 is an error, not U+FFFD that JSON.parse would accept.
    record = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    throw new WebhookVerificationError(`body is not UTF-8 JSON: ${e.message}`);
  }
  if (record === null || typeof record !== 'object' || Array.isArray(record)) {
    throw new WebhookVerificationError('body is JSON but not an object (an execution record)');
  }
  return record;
}

function key(secret) {
  const k = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : bytesOf(secret, 'secret');
  // An unset secret (an empty environment variable) would make every check
  // pass against anyone's empty-key signature.
  if (k.length === 0) throw new RangeError('the webhook secret is empty');
  return k;
}

function raw(body) {
  return typeof body === 'string' ? Buffer.from(body, 'utf8') : bytesOf(body, 'body');
}

function bytesOf(value, what) {
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  const kind = value === null ? 'null' : typeof value;
  throw new TypeError(`${what} must be a string or bytes (the raw body received), not ${kind}`);
}

function seconds(when, what) {
  const s = when instanceof Date ? when.getTime() / 1000 : when;
  if (typeof s !== 'number' || !Number.isFinite(s)) {
    throw new TypeError(`${what} must be unix seconds or a Date`);
  }
  return s;
}

function digest(k, t, bytes) {
  return createHmac('sha256', k).update(`${t}.`, 'latin1').update(bytes).digest('hex');
}

/** {t as sent, the well-formed v1 values} of a Kiln-Signature value. */
function parse(header) {
  // node:http gives an array when a header came twice (a custom one is
  // usually joined with ", " instead): both are the same list of parts.
  if (Array.isArray(header)) header = header.join(',');
  if (header === undefined || header === null) throw new WebhookVerificationError('no Kiln-Signature header');
  if (typeof header !== 'string') throw new TypeError('signature must be the Kiln-Signature header value');
  let t = null;
  const candidates = [];
  // Parts split on "," with spaces trimmed; unknown keys are for later
  // schemes: skipped.
  for (const part of header.split(',')) {
    const item = part.trim();
    const eq = item.indexOf('=');
    const name = eq < 0 ? item : item.slice(0, eq);
    const value = eq < 0 ? '' : item.slice(eq + 1);
    if (name === 't') {
      if (t !== null) throw new WebhookVerificationError('malformed Kiln-Signature: more than one t=');
      t = value;
    } else if (name === 'v1' && kHex64.test(value)) {
      candidates.push(value);
    }
  }
  // `t` is signed as sent, so it must be plain digits (Number() would also
  // take "1e9", " 1" or "0x10", which the broker never sends).
  if (t === null || !kDigits.test(t)) {
    throw new WebhookVerificationError(`malformed Kiln-Signature: no integer t= in ${JSON.stringify(header.slice(0, 200))}`);
  }
  if (candidates.length === 0) {
    throw new WebhookVerificationError(`malformed Kiln-Signature: no v1= of 64 hex digits in ${JSON.stringify(header.slice(0, 200))}`);
  }
  return { t, candidates };
}
