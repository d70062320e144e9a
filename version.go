package tenure

// Version is the release of tenure that this source tree is, in semantic
// versioning (docs/compatibility.md says what a major, minor and patch
// release may change). The module's tag is "v" + Version. The tenure
// command prints it (tenure version) when the binary carries no module
// version of its own, as a build from a clone does not.
const Version = "0.1.0"
