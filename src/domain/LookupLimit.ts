/**
 * An unpaginated list (tenants, channels, scoped API keys, portal users, publishable keys) answers
 * at most this many rows (`lookup_limit`, server-apis.md "Limits").
 */
export const LOOKUP_LIMIT = 1000
