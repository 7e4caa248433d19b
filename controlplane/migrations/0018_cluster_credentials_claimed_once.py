# A credential (credentials_ref) belongs to one cluster: another team naming it would act with its rights.

from django.db import migrations, models
from django.db.models import Count


def refuse_shared_credentials(apps, schema_editor) -> None:  # noqa: ANN001
    """Say which clusters share a credential rather than fail on the constraint; an admin picks who keeps it."""
    Cluster = apps.get_model("controlplane", "Cluster")
    shared = (Cluster.objects.exclude(credentials_ref="").values("credentials_ref")
              .annotate(clusters=Count("id")).filter(clusters__gt=1))
    if shared:
        names = "; ".join(
            f"{row['credentials_ref']}: " + ", ".join(Cluster.objects.filter(credentials_ref=row["credentials_ref"])
                                                      .order_by("name").values_list("name", flat=True))
            for row in shared)
        raise RuntimeError(f"Clusters share credentials ({names}); give each its own credentials_ref, then migrate.")


class Migration(migrations.Migration):

    dependencies = [
        ('controlplane', '0017_scaling_target_hpa'),
    ]

    operations = [
        migrations.RunPython(refuse_shared_credentials, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='cluster',
            name='credentials_ref',
            field=models.CharField(blank=True, error_messages={'unique': 'Another cluster already uses these credentials; a credential belongs to one cluster (ask whoever mounts the credentials for one of your own).'}, help_text='Where the credentials are, never the credentials: token:NAME, kubeconfig:NAME (files in the mounted credentials directory), in-cluster, or empty.', max_length=200),
        ),
        migrations.AddConstraint(
            model_name='cluster',
            constraint=models.UniqueConstraint(condition=models.Q(('credentials_ref', ''), _negated=True), fields=('credentials_ref',), name='cluster_credentials_claimed_once', violation_error_message='Another cluster already uses these credentials; a credential belongs to one cluster (ask whoever mounts the credentials for one of your own).'),
        ),
    ]
