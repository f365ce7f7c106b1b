-- The path the connector lists show of each endpoint no longer states a credential: apply stores a
-- value given in the path's query under a credential's name (api_key=…, token=…, sig=…) or of a
-- well-known key's form as [REDACTED] (src/connectors/auth/stated-credentials.ts,
-- redactQueryCredentials; such a value is accepted in the dev profile only). Paths stored before
-- get the same by the name rule, compared with the whole parameter name as written; the stored
-- spec the runs read keeps the value, and GET /api/connectors/{name} redacts it from the spec.

update connectors.endpoints
   set path = regexp_replace(
         path,
         '([?&](x[-_]?)?(amz[-_]?|goog[-_]?)?(api[-_]?key|key|(access|auth|api|private|session|refresh|id|bearer|security)?[-_]?token|client[-_]?secret|secret|pass(word)?|passwd|pwd|sig(nature)?|credentials?|jwt|auth)=)[^&#]+',
         '\1[REDACTED]',
         'gi')
 where strpos(path, '?') > 0;
