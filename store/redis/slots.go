package redis

import "sync"

// Redis Cluster puts every key in one of 16,384 hash slots: CRC16 (the
// XMODEM variant: polynomial 0x1021, initial value 0) of the key modulo
// 16,384, or of its hash tag when it has one: the bytes between the first
// '{' and the first '}' after it, when there is at least one. The Redis
// Cluster specification ("Key distribution model", "Hash tags") defines
// both; this is its rule, so that the store knows, without asking a node,
// which keys share a slot.

const numSlots = 16384

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16tab[byte(c>>8)^s[i]]
	}
	return c
}

// keySlot returns the hash slot of key.
func keySlot(key string) int {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					break
				}
			}
			break
		}
	}
	return int(crc16(key) % numSlots)
}

// slotTagChars are the bytes of the slot tags, in the order they are tried.
const slotTagChars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

var (
	slotTagsOnce sync.Once
	slotTagsTab  [numSlots]string
)

// slotTag returns the hash tag of slot: the first string, of one to three
// bytes of slotTagChars, shortest first and then in the order of
// slotTagChars, whose CRC16 falls in slot. Every process computes the same
// table (a test pins it), so the stores of a cluster agree on the counter
// key of each slot. Three bytes cover every slot.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		left := numSlots
		try := func(s string) {
			if n := int(crc16(s) % numSlots); slotTagsTab[n] == "" {
				slotTagsTab[n] = s
				left--
			}
		}
		for _, a := range []byte(slotTagChars) {
			try(string(a))
		}
		for _, a := range []byte(slotTagChars) {
			for _, b := range []byte(slotTagChars) {
				try(string([]byte{a, b}))
			}
		}
		for _, a := range []byte(slotTagChars) {
			for _, b := range []byte(slotTagChars) {
				for _, c := range []byte(slotTagChars) {
					if left == 0 {
						return
					}
					try(string([]byte{a, b, c}))
				}
			}
		}
	})
	return slotTagsTab[slot]
}
