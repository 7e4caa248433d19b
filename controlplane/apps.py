from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Headroom core"
