/**
 * The bytes of unpadded URL-safe Base64, or undefined when `text` is not exactly their encoding.
 * Node's decoder skips characters outside the alphabet and drops ones that make no whole byte, so
 * a value with a stray or lost character would otherwise read as another one.
 */
export const decodeExactBase64Url = (text: string): Buffer | undefined => {
  const bytes = Buffer.from(text, "base64url")
  return bytes.length > 0 && bytes.toString("base64url") === text ? bytes : undefined
}
