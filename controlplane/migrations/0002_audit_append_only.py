"""Make the audit log append-only in PostgreSQL itself, not only in the ORM."""
from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION headroom_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'controlplane_auditevent is append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER controlplane_auditevent_append_only
    BEFORE UPDATE OR DELETE ON controlplane_auditevent
    FOR EACH ROW EXECUTE FUNCTION headroom_audit_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS controlplane_auditevent_append_only ON controlplane_auditevent;
DROP FUNCTION IF EXISTS headroom_audit_append_only();
"""


def forwards(apps, schema_editor):  # noqa: ANN001, ANN201
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):  # noqa: ANN001, ANN201
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("controlplane", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
