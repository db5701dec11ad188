// Package seal keeps the values loopgate redacts recoverable by loopgate
// alone. A call's real arguments, when the redactor replaced any of them
// in the stored event, are sealed beside the redacted copy: encrypted with
// AES-256-GCM under a data key of the event's tenant. Each data key is
// kept in the loopgate_keys bucket wrapped by a key-encryption key the
// operator supplies (a KeyWrapper: a local key from a file or the
// environment, or a KMS behind the same interface), so neither the stream
// nor the bucket alone opens anything.
//
// Deleting a tenant's data key (Keyring.Shred) crypto-shreds every value
// sealed under it: the events stay readable, their sealed boxes never
// open again, and a call that needed one ends args_lost.
package seal
