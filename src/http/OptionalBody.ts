import { Schema } from "effect"

/** A JSON body that may be left out: no body (read as `null`) is the empty object. */
export const optionalBody = <F extends Schema.Struct.Fields>(fields: F) => {
  const body = Schema.Struct(fields)
  return Schema.transform(Schema.NullOr(body), Schema.typeSchema(body), {
    strict: true,
    decode: (sent) => sent ?? ({} as Schema.Struct.Type<F>),
    encode: (body) => body
  })
}
