"""`manage.py issue_token USER [--role R] [--team T] [--create]`: print a new API token on the last line."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlplane import services
from controlplane.choices import Channel, Role
from controlplane.models import ApiToken, Team

MAX_EXPIRES_DAYS = 3650  # ten years; past that, leave --expires-days out (API_TOKEN_DEFAULT_DAYS, 0: until revoked)


class Command(BaseCommand):
    help = "Issue an API token for USER. The token is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="user name")
        parser.add_argument("--role", choices=Role.values, help="give USER this role in --team")
        parser.add_argument("--team", help="team slug (or name) for --role; created if --create is given")
        parser.add_argument("--create", action="store_true", help="create the user (and team) if missing")
        parser.add_argument("--name", default="", help="a label for the token, e.g. 'ci-pipeline'")
        parser.add_argument("--expires-days", type=int,
                            help=f"the token expires after this many days, 1 to {MAX_EXPIRES_DAYS} "
                                 "(default: API_TOKEN_DEFAULT_DAYS)")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        self._check_options(options)
        actor = services.Actor(user=None, channel=Channel.CLI)
        with transaction.atomic():
            user = self._user(options["user"], options["create"])
            team = self._team(options["team"], options["create"], actor) if options["team"] else None
            if team is not None and options["role"]:
                services.set_membership(user, team, options["role"], actor)
                self.stderr.write(f"{user.username} is {options['role']} of team {team.slug}.")
            expires_at = None
            if options["expires_days"]:
                expires_at = timezone.now() + timedelta(days=options["expires_days"])
            token, raw = services.issue_token(user, actor, name=options["name"], expires_at=expires_at)
        self.stderr.write(f"Token {token.prefix}… for {user.username}; store it now, it is not shown again.")
        self.stdout.write(raw)

    @staticmethod
    def _check_options(options: dict) -> None:
        """Everything that can be refused before a row is written."""
        if options["role"] and not options["team"]:
            raise CommandError("--role needs --team (a role is held in a team).")
        days = options["expires_days"]
        most = settings.API_TOKEN_MAX_DAYS or MAX_EXPIRES_DAYS
        if days is not None and not 1 <= days <= most:
            cap = " (API_TOKEN_MAX_DAYS)" if settings.API_TOKEN_MAX_DAYS else ""
            raise CommandError(f"--expires-days must be between 1 and {most}{cap}.")
        name_limit = ApiToken._meta.get_field("name").max_length
        if len(options["name"]) > name_limit:
            raise CommandError(f"--name is at most {name_limit} characters.")
        if not options["user"].strip():
            raise CommandError("USER must not be blank.")

    def _user(self, username: str, create: bool) -> AbstractBaseUser:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            if not create:
                raise CommandError(f"No user named {username!r}. Add --create to create it.")
            try:
                user_model._meta.get_field(user_model.USERNAME_FIELD).clean(username, None)
            except ValidationError as exc:
                raise CommandError(f"USER {username!r}: {' '.join(exc.messages)}") from None
            user = user_model.objects.create_user(username=username)
            self.stderr.write(f"Created user {user.username} (no password: API only until one is set).")
        if not user.is_active:
            # The API refuses every token of an inactive user: printing one would only mislead.
            raise CommandError(f"User {username!r} is inactive: the API would refuse the token. Reactivate it first.")
        return user

    @staticmethod
    def _team(wanted: str, create: bool, actor: services.Actor) -> Team:
        slug = slugify(wanted)
        team = (Team.objects.filter(slug=wanted).first() or Team.objects.filter(name=wanted).first()
                or (Team.objects.filter(slug=slug).first() if slug else None))
        if team is not None:
            return team
        if not create:
            raise CommandError(f"No team {wanted!r}. Add --create to create it.")
        if not slug:
            raise CommandError(f"--team {wanted!r} has no letters or digits to make its slug from.")
        name_limit = Team._meta.get_field("name").max_length
        if len(wanted.strip()) > name_limit:
            raise CommandError(f"--team is at most {name_limit} characters.")
        team = Team.objects.create(name=wanted.strip(), slug=slug[:name_limit])
        services.record(actor, "create", team)
        return team
