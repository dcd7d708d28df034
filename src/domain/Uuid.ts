import { Brand, Schema } from "effect"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether `text` is a UUID in its 8-4-4-4-12 hex form, in either case (PostgreSQL's `uuid` input). */
export const isUuid = (text: string): boolean => UUID.test(text)

/**
 * An id as a UUID in either case, decoded to its lower-case form under `brand`: one spelling per id,
 * so that lookups, entity addresses and map keys agree however a client wrote it.
 */
export const LowerCaseUuid = <const B extends string>(brand: B) =>
  Schema.transform(Schema.UUID, Schema.UUID.pipe(Schema.lowercased(), Schema.brand(brand)), {
    strict: true,
    decode: (uuid) => uuid.toLowerCase(),
    encode: (id) => id
  })

/**
 * The hand-made form of a `LowerCaseUuid` decode, for text already matched as a UUID where a decode
 * per request costs too much (the append path, ADR 0006).
 */
export const uuidBrander = <Id extends string & Brand.Brand<string>>(): (uuid: string) => Id => {
  const brand = Brand.nominal<Id>()
  return (uuid) => brand(uuid.toLowerCase() as Brand.Brand.Unbranded<Id>)
}
