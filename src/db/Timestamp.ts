const pattern = /^(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$/

/**
 * Turns PostgreSQL's text form of a `timestamptz` into ISO 8601 UTC with microseconds. pg's default
 * parser returns a millisecond `Date`, and the API promises microseconds.
 */
export const parseTimestamptz = (text: string): string => {
  const m = pattern.exec(text)
  if (m === null) return text
  const [, y, mo, d, h, mi, s, fraction, sign, oh, om, os] = m
  const offsetSeconds = (sign === "-" ? -1 : 1) * (Number(oh) * 3600 + Number(om ?? 0) * 60 + Number(os ?? 0))
  const utcSeconds = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) / 1000 -
    offsetSeconds
  const whole = new Date(utcSeconds * 1000).toISOString().slice(0, 19)
  return `${whole}.${(fraction ?? "").padEnd(6, "0")}Z`
}
