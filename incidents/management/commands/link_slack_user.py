"""`manage.py link_slack_user USER SLACK_USER_ID`: make USER's Slack clicks count as theirs."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane import services as core
from controlplane.choices import Channel
from incidents import services
from incidents.models import SlackIdentity


class Command(BaseCommand):
    help = "Link a Headroom user to a Slack member ID (moving it from another user if needed); --unlink removes it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="Headroom user name")
        parser.add_argument("slack_user_id", nargs="?", help="Slack member ID, e.g. U0123ABCD")
        parser.add_argument("--unlink", action="store_true", help="remove USER's Slack link (give no ID)")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user named {options['user']!r}.")
        actor = core.Actor(user=None, channel=Channel.CLI)
        if options["unlink"]:
            if options["slack_user_id"] is not None:
                raise CommandError("--unlink removes USER's link whatever it is: give no Slack member ID with it.")
            services.unlink_slack_user(user, actor)
            self.stdout.write(f"{user.username} has no Slack link now.")
            return
        if not options["slack_user_id"]:
            raise CommandError("Give the Slack member ID (or --unlink).")
        wanted = options["slack_user_id"].strip().upper()
        # Read before the move, for the message only: the service decides and audits.
        holder = SlackIdentity.objects.select_related("user").filter(slack_user_id=wanted).first()
        try:
            identity = services.link_slack_user(user, options["slack_user_id"], actor, take_over=True)
        except services.NotificationError as exc:
            raise CommandError(str(exc)) from exc
        if holder is not None and holder.user_id == user.pk:
            self.stdout.write(f"Slack user {identity.slack_user_id} is already {user.username}; nothing changed.")
            return
        moved = f" (moved from {holder.user.username})" if holder is not None else ""
        self.stdout.write(f"Slack user {identity.slack_user_id} is {user.username} in Headroom{moved}.")
