package cassandra

// statements are the store's CQL, with the validated keyspace and table
// names spliced in once; every value is a bound parameter.
type statements struct {
	// ModeNative
	grantNewInsert, grantNewOwner   string // batch: a never-seen resource
	grantFreeOwner, grantFreeToken  string // batch: a free resource with a known token
	renew, release, get, list, find string
	// Reservations (reserve.go): a free resource granted only when no
	// waiter reserved it, or only to its waiter; a waiter's reservation.
	grantFreeUnreserved, grantFreeReserved, reserve, unreserve, findWaiter string
	// ModeJaeger
	jInsert, jUpdate, jDelete string
	// jMarker gives the row's liveness the hold's TTL, in Keep's batch.
	jMarker string
}

func newStatements(r resolved) statements {
	t := quote(r.keyspace) + "." + quote(r.table)
	if r.Mode == ModeJaeger {
		return statements{
			// The three statements of Jaeger's lock, on the same table shape.
			jInsert: `INSERT INTO ` + t + ` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?`,
			jUpdate: `UPDATE ` + t + ` USING TTL ? SET owner = ? WHERE name = ? IF owner = ?`,
			jDelete: `DELETE FROM ` + t + ` WHERE name = ? IF owner = ?`,
			jMarker: `INSERT INTO ` + t + ` (name) VALUES (?) USING TTL ?`,
			get:     `SELECT owner, TTL(owner) AS remaining FROM ` + t + ` WHERE name = ?`,
			list:    `SELECT name, owner, TTL(owner) AS remaining FROM ` + t,
			find:    `SELECT name, owner FROM ` + t + ` WHERE name = ?`,
		}
	}
	// Every statement that writes fencing_token or write_id without the
	// lease's TTL says USING TTL 0: a table created or altered with
	// default_time_to_live would otherwise give those cells its default
	// TTL, and a token that expires lets the next grant start over.
	// Cassandra applies each statement's own TTL inside a conditional batch
	// (TestTokenIgnoresDefaultTTL).
	return statements{
		grantNewInsert: `INSERT INTO ` + t + ` (resource, fencing_token) VALUES (?, ?) IF NOT EXISTS USING TTL 0`,
		grantNewOwner:  `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ?`,
		grantFreeOwner: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = null AND fencing_token = ?`,
		grantFreeToken: `UPDATE ` + t + ` USING TTL 0 SET fencing_token = ? WHERE resource = ?`,
		// renew (and keep) applies only over the write it was built from
		// (see casRenew).
		renew:               `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = ? AND fencing_token = ? AND write_id = ?`,
		release:             `UPDATE ` + t + ` USING TTL 0 SET owner = null, ttl_ms = null, write_id = ? WHERE resource = ? IF owner = ? AND fencing_token = ?`,
		grantFreeUnreserved: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = null AND fencing_token = ? AND waiter = null`,
		grantFreeReserved: `UPDATE ` + t + ` USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ?, waiter = null WHERE resource = ? ` +
			`IF owner = null AND fencing_token = ? AND waiter IN (null, ?)`,
		reserve:    `UPDATE ` + t + ` USING TTL ? SET waiter = ? WHERE resource = ? IF waiter IN (null, ?)`,
		unreserve:  `UPDATE ` + t + ` SET waiter = null WHERE resource = ? IF waiter = ?`,
		findWaiter: `SELECT waiter FROM ` + t + ` WHERE resource = ?`,
		get:        `SELECT owner, fencing_token, ttl_ms, write_id, TTL(owner) AS remaining FROM ` + t + ` WHERE resource = ?`,
		list:       `SELECT resource, owner, fencing_token, ttl_ms, TTL(owner) AS remaining FROM ` + t,
		find:       `SELECT resource, owner, fencing_token, ttl_ms, write_id FROM ` + t + ` WHERE resource = ?`,
	}
}

// quote returns a validated, lower-case identifier as a quoted CQL name, so
// that reserved words such as "table" work too.
func quote(ident string) string { return `"` + ident + `"` }
