from django.db import migrations, models


class Migration(migrations.Migration):
    """The predictive kind: the forecast one cold start ahead, decided like a reactive change."""

    dependencies = [
        ('scaling', '0009_warm_pool_reports'),
    ]

    operations = [
        migrations.AlterField(
            model_name='proposal',
            name='kind',
            field=models.CharField(choices=[('prescale', 'Pre-scale (forecast)'), ('warm_pool', 'Warm pool'), ('reactive', 'Reactive (queue depth, request rate)'), ('predictive', 'Predictive (the next cold start)'), ('scheduled', 'Scheduled peak'), ('manual', 'Manual')], max_length=16),
        ),
    ]
