package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotations tenure keeps on the Lease objects it writes. client-go's
// leader election neither reads nor removes them (it updates the object it
// last read, annotations included), so they survive its writes.
const (
	// AnnotationGrant holds the fencing token of the last tenure grant of
	// the Lease and, while that grant (or a keeper of it) holds it, its owner
	// string: "TOKEN OWNER", or "TOKEN" once released.
	AnnotationGrant = "tenure-go.github.io/grant"
	// AnnotationResource holds the tenure resource name when the Lease's
	// name is not the resource itself (see LeaseName).
	AnnotationResource = "tenure-go.github.io/resource"
)

// hashedSuffixLen is the number of hex digits of SHA-256 that end the name
// of a Lease whose resource is not a valid object name.
const hashedSuffixLen = 16

// maxNamePrefix is the longest readable part of such a name: 253 bytes (the
// limit of a Lease name), less the '-' and the hex digits.
const maxNamePrefix = validation.DNS1123SubdomainMaxLength - 1 - hashedSuffixLen

// LeaseName returns the name of the Lease object that keeps resource. A
// resource that is a valid Kubernetes object name (a DNS-1123 subdomain:
// at most 253 characters of lower-case letters, digits, '-' and '.', starting
// and ending with a letter or digit) is its own Lease's name, so that
// tenure and client-go's leader election share the Lease of the same name.
// Any other resource is kept in a Lease named after it in those characters
// (the rest replaced by '-'), followed by '-' and 16 hex digits of its
// SHA-256; the resource itself is then kept in AnnotationResource, and a
// Lease of that name that belongs to another resource is an error, never a
// lease of this one.
func LeaseName(resource string) string {
	name, _ := leaseName(resource)
	return name
}

// leaseName returns the Lease's name and whether it is the resource itself.
func leaseName(resource string) (string, bool) {
	if len(validation.IsDNS1123Subdomain(resource)) == 0 {
		return resource, true
	}
	var b strings.Builder
	dash := true // no leading '-'
	for _, r := range resource {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r - 'A' + 'a')
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= maxNamePrefix {
			break
		}
	}
	prefix := strings.TrimRight(b.String(), "-")
	if len(prefix) > maxNamePrefix {
		prefix = strings.TrimRight(prefix[:maxNamePrefix], "-")
	}
	sum := sha256.Sum256([]byte(resource))
	suffix := hex.EncodeToString(sum[:])[:hashedSuffixLen]
	if prefix == "" {
		return "tenure-" + suffix, false
	}
	return prefix + "-" + suffix, false
}
