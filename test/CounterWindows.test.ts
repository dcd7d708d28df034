import { describe, expect, it } from "@effect/vitest"
import { clientNetwork } from "../src/ratelimit/ClientNetwork.js"
import { CounterWindows } from "../src/ratelimit/CounterWindows.js"

const START = 0
const END = 60_000

describe("the windows a node counts in", () => {
  it("a flood of new addresses keeps the IP windows at their bound, forgetting the least recently used", () => {
    const windows = new CounterWindows(100)
    const busy = windows.take("token_create", "192.0.2.1", START, END, 0)
    busy.local = 7
    const tenant = windows.take("activity_create", "tenant-1", START, END, 0)
    for (let i = 0; i < 100_000; i++) {
      windows.take("login_ip", `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, START, END, 0)
      // Used now and then, the busy window stays the most recently used of the last hundred.
      if (i % 50 === 0) windows.take("token_create", "192.0.2.1", START, END, 0)
    }
    expect(windows.size).toBe(101)
    expect(windows.take("token_create", "192.0.2.1", START, END, 0)).toBe(busy)
    expect(busy.local).toBe(7)
    // Windows of tenants and accounts are not counted against the bound, nor forgotten by it.
    expect(windows.take("activity_create", "tenant-1", START, END, 0)).toBe(tenant)
    // The first address of the flood was forgotten: it starts again from what is stored.
    expect(windows.take("login_ip", "10.0.0.0", START, END, 0).local).toBe(0)
    expect(windows.size).toBe(101)
  })

  it("ended windows are dropped, of every kind", () => {
    const windows = new CounterWindows(10)
    windows.take("token_create", "192.0.2.1", START, END, 0)
    windows.take("activity_create", "tenant-1", START, END, 0)
    windows.take("activity_create", "tenant-1", END, 2 * END, 0)
    windows.dropEnded(END)
    expect([...windows].map((slot) => slot.windowStart)).toEqual([END])
  })
})

describe("the key a client address is counted under", () => {
  it("an IPv6 address by its /64, an IPv4-mapped one as its IPv4 address, other text as given", () => {
    expect(clientNetwork("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).toBe("2001:db8:1:2::/64")
    expect(clientNetwork("2001:0db8:0001:0002::1")).toBe("2001:db8:1:2::/64")
    expect(clientNetwork("2001:db8:1:3::1")).toBe("2001:db8:1:3::/64")
    expect(clientNetwork("::ffff:192.0.2.7")).toBe("192.0.2.7")
    expect(clientNetwork("192.0.2.7")).toBe("192.0.2.7")
    expect(clientNetwork("not an address")).toBe("not an address")
  })
})
