-- rara 0005: artifacts by digest (the dashboard's lineage page, rara ui).
--
-- "Where did this blob come from, and who read it" starts from the manifests naming a digest;
-- without an index that is a scan of every manifest (134 ms at 100k, bench/ui_pages.py),
-- growing with history. A manifest row is inserted once and never updated, so the index
-- costs one insert per artifact and nothing on the hot path's updates (0004). Artifact GC's
-- "still referenced?" check (artifact_forget_many) probes it too.
CREATE INDEX rara_step_artifacts_digest ON rara_step_artifacts (digest);
