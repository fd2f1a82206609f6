-- An operator's cancel (POST /v1/orders/{id}/cancel with "reason":
-- "operator"): cancel_reason gains 'operator'. The CHECK is replaced by name
-- (renamed installations keep the name their table had), found in the
-- catalogue by its definition, as 011 found the status CHECK.
DO $$
DECLARE c text;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
           WHERE conrelid = 'lapse_orders'::regclass AND contype = 'c'
             AND pg_get_constraintdef(oid) LIKE '%cancel_reason%'
  LOOP
    EXECUTE format('ALTER TABLE lapse_orders DROP CONSTRAINT %I', c);
  END LOOP;
END $$;
ALTER TABLE lapse_orders ADD CONSTRAINT lapse_orders_cancel_reason_check
  CHECK (cancel_reason IN ('timeout', 'buyer', 'operator'));
