-- Parses a binding principal: an identity id, or `group:ID` for a group. Exactly one of the
-- two results is set; the identity or group must exist.
CREATE OR REPLACE FUNCTION occ.parse_principal(p_principal text, OUT identity_id text, OUT group_id text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_principal LIKE 'group:%' THEN
        group_id := substr(p_principal, 7);
        IF NOT EXISTS (SELECT 1 FROM occ.iam_groups g WHERE g.id = parse_principal.group_id) THEN
            RAISE EXCEPTION 'no group %', group_id USING ERRCODE = 'no_data_found';
        END IF;
    ELSE
        identity_id := p_principal;
        IF NOT EXISTS (SELECT 1 FROM occ.identities i WHERE i.id = p_principal) THEN
            RAISE EXCEPTION 'no identity %', p_principal USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
END $$;
