// Package modcheck holds a test of what a program that imports tenure
// links: TestLibraryModules builds a fresh module that imports only the
// root package and store/sqlite and checks, with go list -m all, that none
// of the modules only the repository's tools need (plotting, fonts, the
// benchmark) reach it; TestNoKubernetesModules checks that a program that
// imports store/all (every store of this module) lists none of the
// Kubernetes store's modules (store/kubernetes, a module of its own, and
// client-go).
package modcheck
