/**
 * The bytes of unpadded URL-safe Base64, or undefined unless `text` is exactly their encoding: Node's
 * decoder skips stray characters and partial bytes, so a damaged value would read as another one.
 */
export const decodeExactBase64Url = (text: string): Buffer | undefined => {
  const bytes = Buffer.from(text, "base64url")
  return bytes.length > 0 && bytes.toString("base64url") === text ? bytes : undefined
}
