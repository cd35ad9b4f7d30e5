"""Security of the client port: TLS credentials, principals with bearer tokens, ACLs, and the gRPC interceptor that
authenticates and authorizes every call from the broker's applied metadata (docs/security.md).

Owns: token hashing (tokens.py), ACL matching (acl.py), the token and ACL commands of the metadata group
(commands.py, registered with the shared codec) and their planning (state.py, applied by the metadata state
machine), the method → (resource, operation) table (methods.py), the access policy built from applied metadata
(policy.py), the interceptor (interceptor.py), SecurityService and its servicer, TLS server credentials (tls.py), its settings section (settings.py) and what
it registers with the assembly (wiring.py).
"""
