"""A `Project`: one folder holding a vocabulary, a recipe's config and its trained model
(`folder.py`), the folder's names, errors and its typed config (`config.py`), how it is
served (`serving.py`) and which model it holds (`version.py`); its `Tagger` (`tagger.py`),
which tags records as a `SuggestRequest` asks, in forked jobs with `jobs.py`."""

from tagalign.errors import NotTrainedError
from tagalign.project.config import (
    CONFIG_NAME,
    DEFAULT_LIMIT,
    DEFAULT_RECIPE,
    FEEDBACK_FILE,
    MODEL_DIR,
    WORK_DIR,
    LearningNotAllowedError,
    NotAProjectError,
    ProjectConfig,
    ProjectError,
    ProjectExistsError,
    feedback_location,
)
from tagalign.project.folder import Project
from tagalign.project.serving import ServingSettingError, ServingSettings
from tagalign.project.tagger import Tagger
from tagalign.project.version import ModelVersion, model_version
from tagalign.recipes import ReadOnlyError

__all__ = ["CONFIG_NAME", "DEFAULT_LIMIT", "DEFAULT_RECIPE", "FEEDBACK_FILE",
           "MODEL_DIR", "WORK_DIR", "LearningNotAllowedError", "ModelVersion",
           "NotAProjectError",
           "NotTrainedError", "Project", "ProjectConfig", "ProjectError", "ProjectExistsError",
           "ReadOnlyError", "ServingSettingError", "ServingSettings", "Tagger",
           "feedback_location", "model_version"]
