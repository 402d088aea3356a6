/**
 * The INK profile of RFC 3339 (docs/protocol.md 6.1; busguard.protocol.timestamps):
 * `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)`, at most 64 characters,
 * to epoch milliseconds (fraction floored, offset subtracted). Every receiver
 * must read one string as one instant or refuse it, so nothing lenient.
 */

export const MAX_TIMESTAMP_CHARS = 64;
const MS_PER_DAY = 86_400_000;
const GRAMMAR = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(Z|([+-])([0-9]{2}):([0-9]{2}))$/;
const MONTH_DAYS = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function floorDiv(a: number, b: number): number {
  return Math.floor(a / b);
}

function daysFromCivil(year: number, m: number, d: number): number {
  const y = m <= 2 ? year - 1 : year;
  const mp = m <= 2 ? m + 9 : m - 3;
  const era = floorDiv(y, 400);
  const yoe = y - era * 400;
  const doy = floorDiv(153 * mp + 2, 5) + d - 1;
  const doe = yoe * 365 + floorDiv(yoe, 4) - floorDiv(yoe, 100) + doy;
  return era * 146097 + doe - 719468;
}

function civilFromDays(days: number): [number, number, number] {
  const z = days + 719468;
  const era = floorDiv(z, 146097);
  const doe = z - era * 146097;
  const yoe = floorDiv(doe - floorDiv(doe, 1460) + floorDiv(doe, 36524) - floorDiv(doe, 146096), 365);
  const doy = doe - (365 * yoe + floorDiv(yoe, 4) - floorDiv(yoe, 100));
  const mp = floorDiv(5 * doy + 2, 153);
  const d = doy - floorDiv(153 * mp + 2, 5) + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (m <= 2 ? 1 : 0), m, d];
}

export const MIN_EPOCH_MS = daysFromCivil(0, 1, 1) * MS_PER_DAY;
export const MAX_EPOCH_MS = daysFromCivil(10000, 1, 1) * MS_PER_DAY - 1;

function isLeap(y: number): boolean {
  return y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
}

/** Epoch milliseconds of a strict RFC 3339 timestamp; throws naming the value otherwise. */
export function parseTimestamp(ts: string): number {
  const bad = (why: string): Error =>
    new Error(
      `invalid timestamp ${JSON.stringify(ts.slice(0, MAX_TIMESTAMP_CHARS))}: ${why}; expected RFC 3339 ` +
        `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM) with uppercase T/Z, at most ${MAX_TIMESTAMP_CHARS} characters`,
    );
  if (ts.length > MAX_TIMESTAMP_CHARS) throw bad(`longer than ${MAX_TIMESTAMP_CHARS} characters (${ts.length})`);
  const m = GRAMMAR.exec(ts);
  if (m === null) throw bad("does not match the grammar");
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [
    number, number, number, number, number, number,
  ];
  if (month < 1 || month > 12) throw bad("month must be 01-12");
  const dim = month === 2 && isLeap(year) ? 29 : (MONTH_DAYS[month] ?? 0);
  if (day < 1 || day > dim) throw bad(`day must be 01-${dim} for ${ts.slice(0, 7)}`);
  if (hour > 23) throw bad("hour must be 00-23");
  if (minute > 59) throw bad("minute must be 00-59");
  if (second > 59) throw bad("second must be 00-59 (leap seconds are not accepted)");
  let offsetMs = 0;
  if (m[8] !== "Z") {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23) throw bad("offset hour must be 00-23");
    if (om > 59) throw bad("offset minute must be 00-59");
    offsetMs = (oh * 3600 + om * 60) * 1000 * (m[9] === "+" ? -1 : 1);
  }
  const fraction = m[7] ?? "";
  const ms = fraction === "" ? 0 : Number(fraction.slice(0, 3).padEnd(3, "0"));
  return (daysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second) * 1000 + ms + offsetMs;
}

/** `YYYY-MM-DDTHH:MM:SS.mmmZ`: the one spelling senders emit; throws outside years 0000-9999. */
export function formatTimestamp(epochMs: number): string {
  if (!Number.isInteger(epochMs) || epochMs < MIN_EPOCH_MS || epochMs > MAX_EPOCH_MS) {
    throw new Error(`epoch_ms ${epochMs} is outside the RFC 3339 four-digit-year range [${MIN_EPOCH_MS}, ${MAX_EPOCH_MS}]`);
  }
  const days = floorDiv(epochMs, MS_PER_DAY);
  const msOfDay = epochMs - days * MS_PER_DAY;
  const [y, mo, d] = civilFromDays(days);
  const secs = floorDiv(msOfDay, 1000);
  const p = (n: number, w: number): string => String(n).padStart(w, "0");
  return `${p(y, 4)}-${p(mo, 2)}-${p(d, 2)}T${p(floorDiv(secs, 3600), 2)}:${p(floorDiv(secs % 3600, 60), 2)}:${p(secs % 60, 2)}.${p(msOfDay % 1000, 3)}Z`;
}
