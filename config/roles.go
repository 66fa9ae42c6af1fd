package config

// The roles of the values service (the HTTP resources of seed 001, served
// by httpapi, and the console's Components page). Roles are hierarchical
// (see varplane.Identity.Has): "system" and "system:configuration" both
// hold RoleGet and RoleCreate.
const (
	RoleGet    = "system:configuration:get"
	RoleCreate = "system:configuration:create"
)
