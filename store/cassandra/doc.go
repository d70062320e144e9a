// Package cassandra is tenure's store on Apache Cassandra (4.0 and later;
// tested on 5.0.8) and ScyllaDB, through the gocql driver
// (github.com/apache/cassandra-gocql-driver/v2). Leases are rows changed
// only by lightweight transactions (Paxos), so every grant, renewal and
// release is linearizable across all clients of the cluster.
//
// # Schema and statements
//
// ModeNative (the default) keeps one partition per resource:
//
//	CREATE TABLE tenure.tenure_leases (
//	    resource text PRIMARY KEY,
//	    owner text,           -- written with the lease's TTL; null when free
//	    fencing_token bigint, -- written without TTL: survives release and expiry
//	    ttl_ms bigint,        -- the TTL the holder asked for (with the lease's TTL)
//	    write_id bigint,      -- id of the last conditional write (unique; renewals apply over it)
//	    waiter text)          -- a waiting acquire's reservation, with its wait as TTL (see Reserver below)
//
// A grant is one single-partition conditional batch, so the owner and its new
// fencing token are one Paxos round:
//
//	BEGIN UNLOGGED BATCH
//	  UPDATE t USING TTL ? SET owner = ?, ttl_ms = ?, write_id = ? WHERE resource = ? IF owner = null AND fencing_token = ?
//	  UPDATE t SET fencing_token = ? WHERE resource = ?
//	APPLY BATCH
//
// (an INSERT ... IF NOT EXISTS of the token takes the condition's place for a
// resource never seen). The store caches the last token it saw per resource,
// so acquiring a free resource is one lightweight transaction when its view
// is current, and at most two otherwise: a not-applied result carries the
// current row, read by column name, which names the holder (a
// *driver.HeldError), the right token (one more attempt), or this owner (the
// same lease, renewed). A renewal is one conditional UPDATE ... IF owner = ?
// AND fencing_token = ? AND write_id = ? (the row's last write, as the store
// last saw it: a renewal started before another write of the lease never
// applies after it), a release one conditional UPDATE that sets the owner
// to null and keeps the token. Get is a linearizable (SERIAL) read with
// TTL(owner); List scans the table at the commit consistency.
//
// Cassandra sends no release notifications, so a blocking acquire polls;
// so that a holder that releases and acquires again at once does not
// starve a waiter in another process, the store keeps reservations
// (driver.Reserver): a waiting acquire that finds the resource held writes
// its name into the waiter cell (a conditional UPDATE ... IF waiter IN
// (null, ?), with its wait as TTL), and a free resource is granted only
// with that cell null, or to its waiter (the grant's condition says AND
// waiter = null, or AND waiter IN (null, ?), and the waiter's grant clears
// it). A table created by an earlier version lacks the column: Init adds
// it, and until then the Store keeps no reservations.
//
// ModeJaeger uses the table and statements of Jaeger's Cassandra lock, so
// Jaeger collectors and tenure exclude each other on one `leases` table.
// It has no fencing tokens: every token is 0. JaegerLock offers Jaeger's
// lock method set on either mode.
//
// # Consistency
//
// Conditions run at SerialConsistency (SERIAL, or LOCAL_SERIAL when every
// client of a resource is in one data center) and commits at
// CommitConsistency (QUORUM or LOCAL_QUORUM). With a replication factor of 3
// a cluster keeps granting with one replica down.
//
// # TTLs
//
// Cassandra's TTLs are whole seconds; TTL 0 means "never expires". A cell
// written at second x.f with TTL T expires at second x+T, after T−f seconds:
// we measured a lifetime of 1 − f for TTL 1 on Cassandra 5.0.8, for writes at
// f = 0.05 … 0.95 (a write at x.95 lived 42 ms). So the store writes
// StoreTTL(ttl) = ⌈ttl⌉ + 1 seconds, the smallest whole T with T − 1 ≥ ttl:
// the store then keeps every lease at least the requested TTL after it
// applied the write, which the client's deadline (tSend + TTL·(1−ρ)) relies
// on. TTLs below MinTTL (1 s) or above MaxTTL are rejected with
// driver.ErrInvalidTTL before any I/O; a lease whose holder vanished is gone
// at most MaxExpirySlack after its TTL.
//
// # Unknown outcomes
//
// A conditional write whose answer is lost (a CAS write timeout,
// CAS_WRITE_UNKNOWN, a timeout or a lost connection after the request was
// sent) is resolved with a SERIAL read, which also completes a Paxos round
// in flight: a row that carries this call's write id proves the write was
// applied; a row that no longer satisfies the write's condition proves it
// was not (held by another owner, or lost); otherwise, or when the read
// fails too, the result wraps driver.ErrUnknownOutcome and the Locker
// resolves it by retrying safely. Nothing is reported granted or not by
// guess.
//
// See docs/cassandra.md for the URL, the options, operations and ScyllaDB.
package cassandra
