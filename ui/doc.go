// Package ui is the operator console: server-rendered pages under /ui for
// the scopes, their heads and history, side-by-side diffs between
// generations, publishing (or proposing a change where a review policy
// applies), rollback, deactivation and the reviewed changes.
//
// The console holds no authority of its own. Every read and write is a
// request to the server's own API handler, made in process with the
// signed-in token as its bearer (see inProcess), so the API's authorizer
// decides everything exactly as it does for curl or the CLI: a read-only
// token is refused a write even if it forges the form. The console only
// asks the same authorizer, with the same token, whether to show a write
// control at all.
//
// Pages work without JavaScript; one small script of ours (static/app.js,
// an external file, so the Content-Security-Policy allows no inline script)
// follows the live stream and refreshes the parts of a page that show a
// scope's head. Sessions live in memory (a bounded table with an expiry);
// the token never leaves the server's memory, never reaches a log, and is
// never written into a page.
package ui
