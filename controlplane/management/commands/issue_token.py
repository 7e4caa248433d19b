"""`manage.py issue_token USER [--role R] [--team T] [--create]`: print a new API token on the last line."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlplane import services
from controlplane.choices import Channel, Role
from controlplane.models import Team


class Command(BaseCommand):
    help = "Issue an API token for USER. The token is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="user name")
        parser.add_argument("--role", choices=Role.values, help="give USER this role in --team")
        parser.add_argument("--team", help="team slug (or name) for --role; created if --create is given")
        parser.add_argument("--create", action="store_true", help="create the user (and team) if missing")
        parser.add_argument("--name", default="", help="a label for the token, e.g. 'ci-pipeline'")
        parser.add_argument("--expires-days", type=int, help="the token expires after this many days (default: API_TOKEN_DEFAULT_DAYS)")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        if options["role"] and not options["team"]:
            raise CommandError("--role needs --team (a role is held in a team).")
        if options["expires_days"] is not None and options["expires_days"] < 1:
            raise CommandError("--expires-days must be at least 1.")
        actor = services.Actor(user=None, channel=Channel.CLI)
        user_model = get_user_model()
        with transaction.atomic():
            user = user_model.objects.filter(username=options["user"]).first()
            if user is None:
                if not options["create"]:
                    raise CommandError(f"No user named {options['user']!r}. Add --create to create it.")
                user = user_model.objects.create_user(username=options["user"])
                self.stderr.write(f"Created user {user.username} (no password: API only until one is set).")
            team = None
            if options["team"]:
                team = Team.objects.filter(slug=options["team"]).first() or Team.objects.filter(name=options["team"]).first()
                if team is None:
                    if not options["create"]:
                        raise CommandError(f"No team {options['team']!r}. Add --create to create it.")
                    team = Team.objects.create(name=options["team"], slug=slugify(options["team"]))
                    services.record(actor, "create", team)
            if team is not None and options["role"]:
                services.set_membership(user, team, options["role"], actor)
                self.stderr.write(f"{user.username} is {options['role']} of team {team.slug}.")
            expires_at = None
            if options["expires_days"]:
                expires_at = timezone.now() + timedelta(days=options["expires_days"])
            token, raw = services.issue_token(user, actor, name=options["name"], expires_at=expires_at)
        self.stderr.write(f"Token {token.prefix}… for {user.username}; store it now, it is not shown again.")
        self.stdout.write(raw)
