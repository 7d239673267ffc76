// Package config turns the arguments of `sluice serve` and an optional YAML
// file into one validated [Config].
//
// # Sources and precedence
//
// Every setting is a flag of the standard flag package (-name and --name both
// work). A YAML file named by --config uses the flag names as keys. For each
// setting the first source that gives it wins:
//
//  1. the command line;
//  2. the environment (only SLUICE_API_KEY and SLUICE_ADMIN_API_KEY);
//  3. the --config file;
//  4. the built-in default (see [Default] and `sluice serve --help`).
//
// A repeatable flag (--worker-urls, --prefill, --decode, and the selectors
// --selector, --prefill-selector, --decode-selector) given on the command line
// replaces the file's list for that flag rather than adding to it. In the file
// a selector may also be a mapping of labels ({app: sglang, role: prefill}).
//
// # Decisions
//
//   - --prefill and --decode require --pd-disaggregation (parity with the Rust
//     gateway): a PD flag without it is rejected rather than implying PD mode,
//     so a forgotten flag is an error and never a silent mode switch.
//   - --runtime sets the protocol of http(s) workers given by flags; a grpc://
//     URL is detected as an engine's own gRPC (SGLang, vLLM) or the worker
//     gRPC protocol (dispatch.Detector).
//   - Byte sizes accept SI (KB, MB, GB, TB = powers of 1000) and IEC (KiB, MiB,
//     GiB, TiB = powers of 1024) suffixes; a bare number is bytes.
//   - Every duration flag accepts fractional values (e.g. 0.5 seconds).
//   - Kubernetes discovery flags are named like the Rust gateway's (smg). A
//     selector takes one k=v per flag or comma-joined pairs; set-based
//     selectors are rejected rather than misread. --selector in PD mode, role
//     selectors in regular mode, equal prefill and decode selectors, and any
//     discovery flag without --service-discovery are errors.
//   - The Rust gateway's (SMG's) command lines parse unchanged: each of its flags is a sluice
//     flag, an alias, accepted with nothing to do, or refused with one line naming it, why and what to
//     use instead (the tables of smgtable.go); flags taking several values after one name
//     (--worker-urls a b) work as in SMG, and a flag neither sluice nor SMG has is an error naming it
//     (the argument rewriter, smgargs.go). docs/migrating-from-smg.md has the table. An SMG setting
//     sluice has lives in the group of its concern (Server, Telemetry, Placement, Breaker,
//     Concurrency...), like any other setting.
//   - Cluster admission (--admission-coordination) makes the admission limit the fleet's; it needs a
//     positive --prefill-max-inflight-requests-per-worker. --admission-peers alone means static mode;
//     Kubernetes-only flags in static mode, peers in Kubernetes mode, and any cluster flag with
//     coordination off are errors; the lease must be at least twice the exchange period.
//
// # Layout
//
// Settings are grouped by concern, never by where they came from. Each flag is declared once, with
// its default, in flags.go or in the file of its group (security.go, cluster.go, tenants.go, ...);
// finish (flags.go) derives only the defaults that depend on another setting. Validate gathers every
// problem in one collector (validate.go), and the startup summary (summary.go) is read off the flag
// table, so neither lists the settings a second time.
//
// The package is a leaf: it imports no other sluice package, so worker roles
// and protocols are plain strings (see the Role* and Protocol* constants).
package config
