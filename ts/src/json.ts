/**
 * A strict JSON object decoder with msgspec's "first problem decides"
 * semantics, so that a TypeScript reader refuses exactly what busguard's
 * Python reader refuses, and for the same reason (docs/protocol.md 3.3).
 *
 * One pass, in document order, over the raw bytes (never re-serialised):
 * invalid UTF-8 (checked inside strings, where it can occur), invalid
 * syntax, trailing data or a non-object top level is `not_json`; a value of
 * the wrong JSON type is `wrong_type` (a container at once, a scalar once it
 * parsed); a key outside the schema is `unknown_field` when the schema
 * forbids them (at the key's colon, before its value); a value outside its bounds is
 * `constraint`; a number past the double range (msgspec's "Number out of
 * range") is `wrong_type` in a field and `not_json` at the top; at the closing brace, a required field absent is
 * `missing_field`. A repeated key keeps its last value (as msgspec does);
 * every key is returned in order so that a caller can refuse duplicates.
 * An array field's items are read in order, each against its spec, and its
 * length is checked after them (as msgspec does); a string field may carry
 * msgspec's `pattern` (`constraint` when it does not match).
 * Integers (no fraction, no exponent) are exact `bigint`s.
 */
import { fromUtf8 } from "./bytes.js";

export type JsonProblem = "not_json" | "wrong_type" | "unknown_field" | "constraint" | "missing_field";

export class StrictJsonError extends Error {
  constructor(
    readonly problem: JsonProblem,
    /** `$.field` (or `$.source.offset`) where it was met, `$` for the document */
    readonly path: string,
    message: string,
  ) {
    super(message);
  }
}

export interface IntField {
  readonly kind: "int";
  readonly min?: bigint;
  readonly max?: bigint;
}
export interface StrField {
  readonly kind: "str";
  /** bounds in code points, as Python's `len` counts */
  readonly minLength?: number;
  readonly maxLength?: number;
  /** msgspec's `pattern`: Python's `re.search`, so `$` also matches before one final newline */
  readonly pattern?: RegExp;
}
export interface BoolField {
  readonly kind: "bool";
}
/** A JSON array whose items are each `items`; its length is checked after its items (as msgspec does). */
export interface ArrayField {
  readonly kind: "array";
  readonly items: FieldSpec;
  readonly maxLength?: number;
}
export interface ObjectField {
  readonly kind: "object";
  readonly schema: Schema;
}
export type FieldType = IntField | StrField | BoolField | ArrayField | ObjectField;

export interface FieldSpec {
  readonly type: FieldType;
  /** `null` is accepted (for an optional field, the same as absent) */
  readonly nullable: boolean;
  readonly required: boolean;
}

export interface Schema {
  readonly fields: ReadonlyMap<string, FieldSpec>;
  readonly forbidUnknown: boolean;
}

export type JsonValue = bigint | string | boolean | null | DecodedObject | readonly JsonValue[];
export interface DecodedObject {
  readonly values: ReadonlyMap<string, JsonValue>;
  /** every key of the object, in document order, repeats included */
  readonly keys: readonly string[];
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

class Parser {
  pos = 0;
  /** the last unvalidated string held invalid UTF-8 */
  lossy = false;
  constructor(readonly buf: Uint8Array) {}

  fail(problem: JsonProblem, path: string, message: string): never {
    throw new StrictJsonError(problem, path, message);
  }

  syntax(what: string): never {
    return this.fail("not_json", "$", `JSON is malformed: ${what} (byte ${this.pos})`);
  }

  ws(): void {
    while (this.pos < this.buf.length && WS.has(this.buf[this.pos] ?? -1)) this.pos++;
  }

  peek(): number {
    const b = this.buf[this.pos];
    if (b === undefined) return this.syntax("input data was truncated");
    return b;
  }

  expect(byte: number, what: string): void {
    if (this.peek() !== byte) this.syntax(what);
    this.pos++;
  }

  /**
   * A string, its escapes resolved and checked. Its raw bytes are checked
   * as UTF-8 only when `validate` (msgspec checks them only for a string it
   * keeps: not for one it skips or one of the wrong type); otherwise an
   * invalid sequence becomes U+FFFD and `lossy` is set.
   */
  string(validate = true): string {
    this.expect(0x22, "expected a string");
    let out = "";
    let runStart = this.pos;
    const flush = (end: number): void => {
      if (end > runStart) {
        const raw = this.buf.subarray(runStart, end);
        try {
          out += fromUtf8(raw);
        } catch {
          if (validate) this.syntax("invalid UTF-8 in string");
          this.lossy = true;
          out += new TextDecoder().decode(raw);
        }
      }
    };
    for (;;) {
      const b = this.peek();
      if (b === 0x22) {
        flush(this.pos);
        this.pos++;
        return out;
      }
      if (b < 0x20) this.syntax("invalid character in string");
      if (b !== 0x5c) {
        this.pos++;
        continue;
      }
      flush(this.pos);
      this.pos++;
      const e = this.peek();
      this.pos++;
      switch (e) {
        case 0x22: out += '"'; break;
        case 0x5c: out += "\\"; break;
        case 0x2f: out += "/"; break;
        case 0x62: out += "\b"; break;
        case 0x66: out += "\f"; break;
        case 0x6e: out += "\n"; break;
        case 0x72: out += "\r"; break;
        case 0x74: out += "\t"; break;
        case 0x75: {
          const unit = this.hex4();
          if (unit >= 0xdc00 && unit <= 0xdfff) this.syntax("unpaired surrogate in string");
          if (unit >= 0xd800 && unit <= 0xdbff) {
            if (this.peek() !== 0x5c) this.syntax("unpaired surrogate in string");
            this.pos++;
            if (this.peek() !== 0x75) this.syntax("unpaired surrogate in string");
            this.pos++;
            const low = this.hex4();
            if (low < 0xdc00 || low > 0xdfff) this.syntax("unpaired surrogate in string");
            out += String.fromCharCode(unit, low);
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.pos--;
          this.syntax("invalid escape character in string");
      }
      runStart = this.pos;
    }
  }

  hex4(): number {
    let v = 0;
    for (let i = 0; i < 4; i++) {
      const c = this.peek();
      let d: number;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x57;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x37;
      else return this.syntax("invalid \\u escape in string");
      v = v * 16 + d;
      this.pos++;
    }
    return v;
  }

  /** A number: `{ int }` when it has neither fraction nor exponent, else `{ float: true }`. */
  number(): { int: bigint } | { float: true } {
    const start = this.pos;
    const digit = (): boolean => {
      const c = this.buf[this.pos];
      return c !== undefined && c >= 0x30 && c <= 0x39;
    };
    if (this.buf[this.pos] === 0x2d) this.pos++;
    if (!digit()) this.syntax("invalid number");
    if (this.buf[this.pos] === 0x30) {
      this.pos++;
      if (digit()) this.syntax("invalid number");
    } else {
      while (digit()) this.pos++;
    }
    let float = false;
    if (this.buf[this.pos] === 0x2e) {
      float = true;
      this.pos++;
      if (!digit()) this.syntax("invalid number");
      while (digit()) this.pos++;
    }
    if (this.buf[this.pos] === 0x65 || this.buf[this.pos] === 0x45) {
      float = true;
      this.pos++;
      if (this.buf[this.pos] === 0x2b || this.buf[this.pos] === 0x2d) this.pos++;
      if (!digit()) this.syntax("invalid number");
      while (digit()) this.pos++;
    }
    if (float) return { float: true };
    let text = "";
    for (let i = start; i < this.pos; i++) text += String.fromCharCode(this.buf[i] ?? 0);
    return { int: BigInt(text) };
  }

  literal(word: string): void {
    for (let i = 0; i < word.length; i++) {
      if (this.buf[this.pos + i] !== word.charCodeAt(i)) this.syntax("invalid character");
    }
    this.pos += word.length;
  }

  /** Any value, validated and dropped (an unknown field a schema allows). */
  skipValue(depth = 0): void {
    if (depth > 64) this.syntax("nesting too deep");
    this.ws();
    const c = this.peek();
    if (c === 0x22) {
      this.string(false);
    } else if (c === 0x7b || c === 0x5b) {
      const close = c === 0x7b ? 0x7d : 0x5d;
      this.pos++;
      this.ws();
      if (this.peek() === close) {
        this.pos++;
        return;
      }
      for (;;) {
        if (c === 0x7b) {
          this.ws();
          if (this.peek() !== 0x22) this.syntax("object keys must be strings");
          this.string(false);
          this.ws();
          this.expect(0x3a, "expected ':'");
        }
        this.skipValue(depth + 1);
        this.ws();
        const n = this.peek();
        this.pos++;
        if (n === close) return;
        if (n !== 0x2c) this.syntax("expected ',' or a closing bracket");
        this.ws();
        if (this.peek() === close) this.syntax("trailing comma");
      }
    } else if (c === 0x74) this.literal("true");
    else if (c === 0x66) this.literal("false");
    else if (c === 0x6e) this.literal("null");
    else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) this.number();
    else this.syntax("invalid character");
  }

  typed(spec: FieldSpec, path: string): JsonValue {
    this.ws();
    const c = this.peek();
    const got = (what: string): never => this.fail("wrong_type", path, `Expected \`${spec.type.kind}\`, got \`${what}\` - at \`${path}\``);
    if (c === 0x7b) {
      if (spec.type.kind !== "object") return got("object");
      return this.object(spec.type.schema, path);
    }
    if (c === 0x5b) {
      if (spec.type.kind !== "array") return got("array");
      return this.array(spec.type, path);
    }
    if (c === 0x6e) {
      this.literal("null");
      return spec.nullable ? null : got("null");
    }
    if (c === 0x74 || c === 0x66) {
      this.literal(c === 0x74 ? "true" : "false");
      return spec.type.kind === "bool" ? c === 0x74 : got("bool");
    }
    if (c === 0x22) {
      const s = this.string(spec.type.kind === "str");
      if (spec.type.kind !== "str") return got("str");
      const n = codePoints(s);
      if (spec.type.minLength !== undefined && n < spec.type.minLength) {
        this.fail("constraint", path, `Expected \`str\` of length >= ${spec.type.minLength} - at \`${path}\``);
      }
      if (spec.type.maxLength !== undefined && n > spec.type.maxLength) {
        this.fail("constraint", path, `Expected \`str\` of length <= ${spec.type.maxLength} - at \`${path}\``);
      }
      if (spec.type.pattern !== undefined && !spec.type.pattern.test(s)) {
        this.fail("constraint", path, `Expected \`str\` matching regex ${JSON.stringify(spec.type.pattern.source)} - at \`${path}\``);
      }
      return s;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const start = this.pos;
      const num = this.number();
      if (!("int" in num) || spec.type.kind !== "int") {
        // msgspec reads a number it cannot keep as a double: one past the
        // double range is "Number out of range", the wrong type at this path
        // (docs/protocol.md 3.2: never an integer, never the field's type)
        let text = "";
        for (let i = start; i < this.pos; i++) text += String.fromCharCode(this.buf[i] ?? 0);
        if (!Number.isFinite(Number(text))) this.fail("wrong_type", path, `Number out of range - at \`${path}\``);
        return got("int" in num ? "int" : "float");
      }
      if (spec.type.min !== undefined && num.int < spec.type.min) {
        this.fail("constraint", path, `Expected \`int\` >= ${spec.type.min} - at \`${path}\``);
      }
      if (spec.type.max !== undefined && num.int > spec.type.max) {
        this.fail("constraint", path, `Expected \`int\` <= ${spec.type.max} - at \`${path}\``);
      }
      return num.int;
    }
    return this.syntax("invalid character");
  }

  array(type: ArrayField, path: string): JsonValue[] {
    this.expect(0x5b, "expected an array");
    const out: JsonValue[] = [];
    this.ws();
    if (this.peek() === 0x5d) {
      this.pos++;
    } else {
      for (;;) {
        out.push(this.typed(type.items, `${path}[${out.length}]`));
        this.ws();
        const n = this.peek();
        this.pos++;
        if (n === 0x5d) break;
        if (n !== 0x2c) this.syntax("expected ',' or ']'");
        this.ws();
        if (this.peek() === 0x5d) this.syntax("trailing comma in array");
      }
    }
    if (type.maxLength !== undefined && out.length > type.maxLength) {
      this.fail("constraint", path, `Expected \`array\` of length <= ${type.maxLength} - at \`${path}\``);
    }
    return out;
  }

  object(schema: Schema, path: string): DecodedObject {
    this.expect(0x7b, "expected an object");
    const values = new Map<string, JsonValue>();
    const keys: string[] = [];
    this.ws();
    if (this.peek() === 0x7d) {
      this.pos++;
    } else {
      for (;;) {
        this.ws();
        if (this.peek() !== 0x22) this.syntax("object keys must be strings");
        this.lossy = false;
        const key = this.string(false);
        const lossyKey = this.lossy;
        this.ws();
        this.expect(0x3a, "expected ':'");
        const spec = lossyKey ? undefined : schema.fields.get(key);
        const at = `${path}.${key}`;
        if (spec === undefined && schema.forbidUnknown) {
          if (lossyKey) this.syntax("invalid UTF-8 in object key");
          this.fail("unknown_field", at, `Object contains unknown field \`${key}\` - at \`${path}\``);
        }
        if (spec === undefined) {
          this.skipValue();
        } else {
          keys.push(key);
          values.set(key, this.typed(spec, at));
        }
        this.ws();
        const n = this.peek();
        this.pos++;
        if (n === 0x7d) break;
        if (n !== 0x2c) this.syntax("expected ',' or '}'");
        this.ws();
        if (this.peek() === 0x7d) this.syntax("trailing comma in object");
      }
    }
    for (const [name, spec] of schema.fields) {
      if (spec.required && !values.has(name)) {
        this.fail("missing_field", `${path}.${name}`, `Object missing required field \`${name}\` - at \`${path}\``);
      }
    }
    return { values, keys };
  }
}

/** Python's `len`: code points, a surrogate pair counting once. */
export function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

/** Decode `raw` as one object of `schema`; StrictJsonError names the first problem. */
export function decodeObject(raw: Uint8Array, schema: Schema): DecodedObject {
  const p = new Parser(raw);
  p.ws();
  if (p.pos >= raw.length) p.syntax("input data was truncated");
  const c = p.peek();
  if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
    // msgspec reads a top-level number before refusing it, and one past the
    // double range is its "Number out of range": no object either way (not_json)
    const start = p.pos;
    p.number();
    let text = "";
    for (let i = start; i < p.pos; i++) text += String.fromCharCode(raw[i] ?? 0);
    if (!Number.isFinite(Number(text))) p.fail("not_json", "$", "Number out of range");
    p.fail("not_json", "$", "Expected `object`");
  }
  if (c !== 0x7b) {
    p.skipValue();
    p.ws();
    if (p.pos < raw.length) p.syntax("trailing characters");
    p.fail("not_json", "$", "Expected `object`");
  }
  const out = p.object(schema, "$");
  p.ws();
  if (p.pos < raw.length) p.syntax("trailing characters");
  return out;
}

/** `JSON.stringify` of a string is msgspec's encoding of it, byte for byte, for well-formed strings. */
export function encodeString(s: string): string {
  return JSON.stringify(s);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Strings with an unpaired surrogate have no UTF-8 encoding: refused wherever text is encoded. */
export function isWellFormed(s: string): boolean {
  return !LONE_SURROGATE.test(s);
}

export function field(type: FieldType, opts: { nullable?: boolean; required?: boolean } = {}): FieldSpec {
  return { type, nullable: opts.nullable ?? false, required: opts.required ?? true };
}
