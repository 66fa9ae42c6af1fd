// Package wire is varplane's one wire layer: what every server and every
// client of the project does the same way, written once.
//
//   - the error model in both directions: an error's code becomes an HTTP
//     status and a JSON body {code, error, details…} (Status, WriteError), and
//     a client turns that body back into the *varplane.Error it came from
//     (ParseError, ResponseError), details included;
//   - request bodies: a bounded read that still lets a client that sent its
//     whole body read the 413 (ReadBody), the accepted media types
//     (CheckContentType), and one strict JSON decoder held to varplane.Limits
//     (DecodeStrict);
//   - one YAML-to-JSON converter with one policy (YAMLToJSON);
//   - credentials (Bearer, and BasicPassword for a browser's page), query
//     parameters (QueryParams, Targets);
//   - JSON bodies written one way (WriteJSON, and jsontext for hand-built
//     bodies);
//   - Server-Sent Events frames, written (AppendEvent) and read (SSEReader);
//   - the client side: the HTTP client and its timeouts (NewHTTPClient),
//     requests with a JSON body and the bearer (NewRequest), answers read
//     back as the server's error (Do) and event streams checked
//     (CheckStream); its reconnections wait by internal/backoff, which the
//     shared stores use too;
//   - the Host names a listener answers (HostPolicy), against DNS rebinding.
//
// Transports add framing only. Everything here is safe for concurrent use.
package wire
