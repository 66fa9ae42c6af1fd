package file

import "github.com/varplane/varplane"

// The contract and the optional capabilities (varplane's capabilities.go)
// this store implements; store/storetest checks each of them.
var (
	_ varplane.Store            = (*Store)(nil)
	_ varplane.HeartbeatStore   = (*Store)(nil)
	_ varplane.Reclaimer        = (*Store)(nil)
	_ varplane.ReclaimFinisher  = (*Store)(nil)
	_ varplane.Replayer         = (*Store)(nil)
	_ varplane.CheckedPublisher = (*Store)(nil)
	_ varplane.WriteReadiness   = (*Store)(nil)
)
