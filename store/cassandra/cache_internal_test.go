package cassandra

import (
	"testing"
	"time"
)

// TestTokenCacheOnlyRaises: answers of concurrent calls arrive in no
// order; a lower token seen after a higher one (a read made before a grant
// and answered after it) must not lower the token a fresh grant starts
// above when the row is deleted (Store.nextToken).
func TestTokenCacheOnlyRaises(t *testing.T) {
	c := newTokenCache(8)
	c.set("r", 10)
	c.set("r", 5)
	c.set("r", 0)
	if got, ok := c.get("r"); !ok || got != 10 {
		t.Fatalf("after set 10, 5, 0: %d, %v; want 10", got, ok)
	}
	c.saw("r", row{hasOwner: true, owner: "a", token: 7, writeID: 3, writeIDCell: int64(3)})
	if got, _ := c.get("r"); got != 10 {
		t.Fatalf("after a row with token 7 was seen: %d; want 10", got)
	}
	// A refused acquire names the holder's row's token: a lower one (a row
	// restored from a snapshot, or the refusal answered after a later
	// grant) does not lower the floor either (adversarial review: a grant
	// then got a lower token than an earlier one on a real node).
	c.seen("r", "q", 6, time.Now())
	if got, _ := c.get("r"); got != 10 {
		t.Fatalf("after a refusal by a holder with token 6: %d; want 10", got)
	}
	c.wrote("r", "a", 12, 4)
	if got, _ := c.get("r"); got != 12 {
		t.Fatalf("after a grant of token 12: %d; want 12", got)
	}
}

// TestTokenCacheLastWrite: the write a renewal names is the last one seen
// of that very grant; another grant's, or a row without a lease, names
// none.
func TestTokenCacheLastWrite(t *testing.T) {
	c := newTokenCache(8)
	if id, ok := c.lastWrite("r", "a", 1); ok || id != nil {
		t.Fatalf("empty cache: %v, %v", id, ok)
	}
	c.wrote("r", "a", 1, 100)
	if id, ok := c.lastWrite("r", "a", 1); !ok || id != int64(100) {
		t.Fatalf("after a write: %v, %v; want 100", id, ok)
	}
	if _, ok := c.lastWrite("r", "b", 1); ok {
		t.Fatal("another owner's grant named a write")
	}
	if _, ok := c.lastWrite("r", "a", 2); ok {
		t.Fatal("another token's grant named a write")
	}
	c.saw("r", row{hasOwner: true, owner: "a", token: 1, writeID: 200, writeIDCell: int64(200)})
	if id, _ := c.lastWrite("r", "a", 1); id != int64(200) {
		t.Fatalf("after a row was seen: %v; want 200", id)
	}
	c.saw("r", row{present: true})
	if _, ok := c.lastWrite("r", "a", 1); ok {
		t.Fatal("a free row left a write to renew over")
	}
	if got, _ := c.get("r"); got != 1 {
		t.Fatalf("the token went with the write: %d", got)
	}
}
