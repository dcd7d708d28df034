import { Option } from "effect"

// Uppercase `T` and `Z` only, seconds optional, at most nanoseconds: anything else is not an instant here.
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:Z|([+-])(\d{2}):(\d{2}))$/

const isLeapYear = (year: number) => (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0

const daysInMonth = (year: number, month: number) =>
  month === 2 ? (isLeapYear(year) ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31

/**
 * Reads an ISO 8601 date-time with `Z` or a `±hh:mm` offset (`2030-01-31T12:00:00.5+02:00`) whose every
 * component exists, to the millisecond; None rather than a rolled-over date.
 */
export const parseInstant = (text: string): Option.Option<Date> => {
  const match = DATE_TIME.exec(text)
  if (match === null) return Option.none()
  const [, y, mo, d, h, mi, s, fraction, sign, offsetHours, offsetMinutes] = match
  const year = Number(y)
  const month = Number(mo)
  const day = Number(d)
  const hour = Number(h)
  const minute = Number(mi)
  const second = Number(s ?? 0)
  const offset = sign === undefined ? 0 : (sign === "-" ? -1 : 1) * (Number(offsetHours) * 60 + Number(offsetMinutes))
  const valid = year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month) &&
    hour <= 23 && minute <= 59 && second <= 59 &&
    (sign === undefined || (Number(offsetHours) <= 23 && Number(offsetMinutes) <= 59))
  if (!valid) return Option.none()
  const at = new Date(0)
  // setUTCFullYear, unlike Date.UTC, does not read years 0–99 as 1900–1999.
  at.setUTCFullYear(year, month - 1, day)
  at.setUTCHours(hour, minute - offset, second, Number((fraction ?? "").padEnd(3, "0").slice(0, 3)))
  return Option.some(at)
}
